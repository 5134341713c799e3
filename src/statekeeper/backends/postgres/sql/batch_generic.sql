-- Migration 15: sk_append_batch's statements keep one generic plan a connection. With
-- plan_cache_mode = auto, PL/pgSQL's cached statements took custom plans for their
-- array parameters and re-planned on most calls (the keyed UPDATE: 84 plans in 162
-- calls of a pool connection, 100-500 us a plan, against 13 us for a reused one). A
-- generic plan counts unnest(p_agents) as 10 rows whatever the batch; on a small or
-- never analyzed table it found hashing the whole table cheaper than 10 probes, and
-- kept that plan for the connection's life: every statement of the batch names its
-- rows by key, so seq scans are off in it too (the planner takes them only where no
-- index serves). Both are set on the function only (and what it calls: sk_append
-- for a batch not set-based): the store's other statements, and a partitioned store's
-- single-agent ones outside a batch, plan as the session says.
ALTER FUNCTION {s}.sk_append_batch(
    text[], bigint[], int[], text[], bigint[], float8[], bytea[], bytea[],
    bigint[], text[], float8[], bytea[], bytea[], bytea[], boolean[], bytea[],
    text[], bigint[])
    SET plan_cache_mode = force_generic_plan
    SET enable_seqscan = off;
