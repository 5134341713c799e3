-- Migration 19: sk_append_batch never JIT-compiles. Its enable_seqscan = off (migration
-- 15) also reaches the statements row-level security adds to it: every check of a
-- tenant's rows (sk_allowed, sql/row_security.sql) reads sk_grants, which has no
-- index, so its seq scan (the only path) is costed with the 1e10 penalty of a disabled
-- plan type, far above jit_above_cost, jit_inline_above_cost and
-- jit_optimize_above_cost: with jit on (PostgreSQL's default where LLVM is installed),
-- each such statement of the batch (and of sk_append, which the batch calls) was
-- JIT-compiled with inlining and optimization, 100-400 ms of server CPU, a SQL
-- function's body again on each call: about a second a governed save under row-level
-- security, its transaction holding the audit log's head all along (4 tenant writers x
-- 12 saves: 114-166 s; a single save alone 1.0-1.7 s). The plans are those of
-- migration 15 (a batch's statements never gain from compiling). ALTER FUNCTION ...
-- SET keeps the function's other settings.
ALTER FUNCTION {s}.sk_append_batch(
    text[], bigint[], int[], text[], bigint[], float8[], bytea[], bytea[],
    bigint[], text[], float8[], bytea[], bytea[], bytea[], boolean[], bytea[],
    text[], bigint[])
    SET jit = off;
