BEGIN TRANSACTION;
CREATE TABLE sk_agents (
    agent_id   TEXT PRIMARY KEY,
    head_seq   INTEGER NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    head_tag   BLOB
) WITHOUT ROWID;
INSERT INTO "sk_agents" VALUES('user-1',1,1.79655898005062270167e+09,1.79655898005062270167e+09,X'01026B31D562474A0F792171C4E9FE5F7EC10D59014AD0B487EFAEF17AAB77634E648873');
CREATE TABLE sk_events (
    agent_id TEXT NOT NULL,
    seq      INTEGER NOT NULL,
    kind     TEXT NOT NULL,
    ts       REAL NOT NULL,
    payload  BLOB NOT NULL,
    checksum BLOB NOT NULL,
    PRIMARY KEY (agent_id, seq)
);
INSERT INTO "sk_events" VALUES('user-1',1,'created',1.79655898005062270167e+09,X'0120026B3102A769C9EF92756E8C8A38AD9847B574C3A59471184C72B2D7D853475EC66237761C651CCD7551DAE6378BDA50AB8D4070F237978B8D04EAB15B3DC603EF9450AE5910F9F37235D7504D872991533F050C368671EF327D768986075F9F816DB37B57828EF9F6E8EC3B39FDE9DFE8FBE7D1FCB202',X'CB5B3A3FB4403F952529DE7F16204385');
CREATE TABLE sk_feed (
        position INTEGER PRIMARY KEY,
        agent_id TEXT NOT NULL,
        seq      INTEGER NOT NULL
    );
INSERT INTO "sk_feed" VALUES(1,'user-1',1);
CREATE TABLE sk_feed_deleted (
        agent_id TEXT PRIMARY KEY,
        through  INTEGER NOT NULL
    ) WITHOUT ROWID;
CREATE TABLE sk_idempotency (
    agent_id  TEXT NOT NULL,
    key       TEXT NOT NULL,
    first_seq INTEGER NOT NULL,
    last_seq  INTEGER NOT NULL,
    created_at REAL NOT NULL,
    PRIMARY KEY (agent_id, key)
) WITHOUT ROWID;
CREATE TABLE sk_leases (
    agent_id   TEXT PRIMARY KEY,
    holder     TEXT,
    token      INTEGER NOT NULL,
    expires_at REAL NOT NULL
) WITHOUT ROWID;
CREATE TABLE sk_meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
INSERT INTO "sk_meta" VALUES('feed_id','9d41d6de1a0ab41d');
INSERT INTO "sk_meta" VALUES('schema_version','5');
INSERT INTO "sk_meta" VALUES('marker:encrypted','1');
CREATE TABLE sk_snapshots (
    agent_id TEXT NOT NULL,
    seq      INTEGER NOT NULL,
    ts       REAL NOT NULL,
    payload  BLOB NOT NULL,
    checksum BLOB NOT NULL,
    PRIMARY KEY (agent_id, seq)
);
CREATE INDEX sk_agents_written ON sk_agents (updated_at, agent_id);
CREATE TRIGGER sk_feed_append AFTER INSERT ON sk_events BEGIN
        INSERT INTO sk_feed (agent_id, seq) VALUES (new.agent_id, new.seq);
    END;
CREATE TRIGGER sk_feed_forget AFTER DELETE ON sk_agents BEGIN
        INSERT INTO sk_feed_deleted (agent_id, through)
        VALUES (old.agent_id, coalesce((SELECT max(position) FROM sk_feed), 0))
        ON CONFLICT (agent_id) DO UPDATE SET through = excluded.through;
    END;
COMMIT;
