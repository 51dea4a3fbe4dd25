-- What load_log computes once per run and stores in the derived_* tables.
--
-- audit.load.derive runs these statements with `events` shadowed by a TEMP
-- VIEW of one run's rows, so every query here sees a single run and `run` is
-- not part of any key. Each statement writes a TEMP table; the ones named
-- _derived_<x> are then copied into the derived_<x> table of the database
-- (replacing that run's rows), and every TEMP table is dropped.
--
-- The results are exactly those of the plain definitions in plain.sql (the
-- views as they would be computed straight from the events; a test compares
-- the two). The differences are only in how they are computed:
--   * one pass per event type over the run, read into narrow TEMP tables;
--   * every workload gets an integer key, `wkey` (the seq of its first accepted
--     submission), so the sort that pairs each start with the workload's next
--     lifecycle event, and every join after it, are on integers;
--   * lifecycle event types are small integer codes through the sort;
--   * the per-host timeline merges the changes at the same instant before its
--     running sums (the plain view drops those zero-length steps afterwards).
--
-- `at` and `by` are keywords in DuckDB 2 and are quoted where unqualified.

-- Inputs the scheduler rejected: the anti-join below drops them (as
-- accepted_events does), against a table whose size the planner knows.
CREATE OR REPLACE TEMP TABLE _d_rejected AS
SELECT DISTINCT cause AS id FROM events
WHERE type IN ('workload.rejected', 'budget.edit_rejected', 'input.rejected') AND cause IS NOT NULL;

CREATE OR REPLACE TEMP VIEW _d_accepted AS
SELECT e.* FROM events AS e ANTI JOIN _d_rejected AS r ON e.id = r.id;

-- Workloads ------------------------------------------------------------------------

-- Accepted workload events, narrow. code: 0 submitted, 1 started, 2 preempted,
-- 3 finished, 4 cancelled.
CREATE OR REPLACE TEMP TABLE _d_wev AS
SELECT seq, t, workload,
       (CASE type WHEN 'workload.submitted' THEN 0 WHEN 'workload.started' THEN 1
                  WHEN 'workload.preempted' THEN 2 WHEN 'workload.finished' THEN 3
                  ELSE 4 END)::UTINYINT AS code
FROM _d_accepted
WHERE type IN ('workload.submitted', 'workload.started', 'workload.preempted', 'workload.finished',
               'workload.cancelled');

-- Each submitted workload's key: the seq of its first accepted submission (a
-- re-sent identical submission does not count). Lifecycle events of a workload
-- that was never submitted belong to no row of workloads or runs.
CREATE OR REPLACE TEMP TABLE _d_key AS
SELECT workload, min(seq) AS wkey FROM _d_wev WHERE code = 0 GROUP BY workload;

-- Each lifecycle event with the same workload's next one (the lifecycle view).
CREATE OR REPLACE TEMP TABLE _d_life AS
SELECT wkey, seq, t, code,
       lead(seq) OVER w AS next_seq,
       lead(t) OVER w AS next_t,
       lead(code) OVER w AS next_code
FROM (SELECT k.wkey, e.seq, e.t, e.code FROM _d_wev AS e JOIN _d_key AS k USING (workload)
      WHERE e.code > 0)
WINDOW w AS (PARTITION BY wkey ORDER BY seq);

-- What a preempted or finished event says (runs and workloads read it by seq).
CREATE OR REPLACE TEMP TABLE _d_stop AS
SELECT seq, reason, "by", requeued, outcome FROM _d_accepted
WHERE type IN ('workload.preempted', 'workload.finished');

-- The first accepted submission of each workload.
CREATE OR REPLACE TEMP TABLE _d_sub AS
SELECT e.seq AS wkey, e.workload, e.budget, e."user", e.kind, e.gpus, e.hosts, e.min_runtime_s,
       e.resumable, e.priority, e.expected_duration_s, e.t AS submitted_at, e.id AS submit_event
FROM events AS e SEMI JOIN _d_key AS k ON e.seq = k.wkey
WHERE e.type = 'workload.submitted';

-- Per workload: first start, starts, preemptions, the waits after each requeue,
-- and its last lifecycle event (where it stands at the end of the log).
CREATE OR REPLACE TEMP TABLE _d_per_workload AS
SELECT l.wkey,
       min(l.t) FILTER (WHERE l.code = 1) AS first_started_at,
       count(*) FILTER (WHERE l.code = 1) AS runs,
       count(*) FILTER (WHERE l.code = 2) AS preemptions,
       list(CASE WHEN l.next_code = 1 THEN l.next_t - l.t END ORDER BY l.seq)
           FILTER (WHERE l.code = 2 AND e.requeued) AS requeue_waits,
       arg_max(l.code, l.seq) AS last_code,
       arg_max(l.t, l.seq) AS last_t,
       arg_max(e.outcome, l.seq) AS last_outcome,
       arg_max(e.requeued, l.seq) AS last_requeued
FROM _d_life AS l LEFT JOIN _d_stop AS e ON e.seq = l.seq
GROUP BY l.wkey;

CREATE OR REPLACE TEMP TABLE _derived_workloads AS
WITH teams AS (
    SELECT b.budget, team_of(b.budget, p.team_depth) AS team
    FROM (SELECT DISTINCT budget FROM _d_sub) AS b CROSS JOIN policy AS p
)
SELECT p.run, sub.wkey, sub.workload, sub.budget, tm.team, sub."user", sub.kind, sub.gpus, sub.hosts,
       sub.min_runtime_s, sub.resumable, sub.priority, sub.min_runtime_s > 0 AS funded,
       sub.expected_duration_s, sub.submit_event, sub.submitted_at, c.first_started_at,
       CASE WHEN c.last_code IN (3, 4) OR (c.last_code = 2 AND NOT c.last_requeued)
            THEN c.last_t END AS ended_at,
       CASE c.last_code
            WHEN 3 THEN c.last_outcome
            WHEN 4 THEN 'cancelled'
            WHEN 1 THEN 'running'
            WHEN 2 THEN CASE WHEN c.last_requeued THEN 'pending' ELSE 'preempted' END
            ELSE 'pending' END AS status,
       coalesce(c.preemptions, 0) AS preemptions,
       coalesce(c.runs, 0) AS runs,
       c.first_started_at - sub.submitted_at AS first_wait_s,
       coalesce(c.requeue_waits, []::BIGINT[]) AS requeue_waits
FROM _d_sub AS sub
CROSS JOIN policy AS p
LEFT JOIN teams AS tm ON tm.budget IS NOT DISTINCT FROM sub.budget
LEFT JOIN _d_per_workload AS c USING (wkey);

-- One row per run interval: a start until the workload's next lifecycle event.
CREATE OR REPLACE TEMP TABLE _derived_runs AS
SELECT w.run, w.wkey, w.workload, w.budget, w.team, w."user", w.kind, w.gpus, w.funded,
       b.allocated, b.protected_until,
       l.t AS start_at,
       coalesce(l.next_t, s.end_t) AS stop_at,
       coalesce(l.next_t, s.end_t) - l.t AS duration_s,
       CASE l.next_code WHEN 3 THEN e.outcome WHEN 4 THEN 'cancelled' WHEN 2 THEN 'preempted'
            ELSE 'open' END AS stop_reason,
       CASE WHEN l.next_code = 2 THEN e.reason END AS preempt_reason,
       e."by" AS preempted_by,
       e.requeued,
       b.placement,
       l.seq AS start_seq,
       l.next_seq AS stop_seq
FROM _d_life AS l
JOIN _derived_workloads AS w USING (wkey)
CROSS JOIN log_span AS s
JOIN (SELECT seq, allocated, protected_until, placement FROM _d_accepted
      WHERE type = 'workload.started') AS b ON b.seq = l.seq
LEFT JOIN _d_stop AS e ON e.seq = l.next_seq
WHERE l.code = 1;

-- Hosts ------------------------------------------------------------------------------

-- Every change to a host (as in host_changes), summed per host and instant, plus
-- a last change at the end of the log that brings each host back to zero.
CREATE OR REPLACE TEMP TABLE _d_host_steps AS
WITH membership AS (
    SELECT host, t, type, gpus,
           last_value(gpus IGNORE NULLS) OVER (PARTITION BY host ORDER BY seq
                                               ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS size
    FROM _d_accepted
    WHERE type IN ('host.added', 'host.removed')
),
slots AS (
    SELECT start_at, stop_at, stop_reason, allocated, unnest(placement) AS slot FROM _derived_runs
),
changes AS (
    SELECT host, t, CASE WHEN type = 'host.added' THEN gpus ELSE -size END AS d_present,
           0 AS d_fault, 0 AS d_alloc, 0 AS d_unalloc
    FROM membership
    UNION ALL
    SELECT host, faulted_at, 0, 1, 0, 0 FROM host_faults
    UNION ALL
    SELECT host, coalesce(repaired_at, removed_at), 0, -1, 0, 0 FROM host_faults
    WHERE coalesce(repaired_at, removed_at) IS NOT NULL
    UNION ALL
    SELECT slot.host, start_at, 0, 0,
           CASE WHEN allocated THEN slot.gpus ELSE 0 END, CASE WHEN allocated THEN 0 ELSE slot.gpus END
    FROM slots
    UNION ALL
    SELECT slot.host, stop_at, 0, 0,
           CASE WHEN allocated THEN -slot.gpus ELSE 0 END, CASE WHEN allocated THEN 0 ELSE -slot.gpus END
    FROM slots WHERE stop_reason <> 'open'
),
per_instant AS (
    SELECT host, t, sum(d_present) AS d_present, sum(d_fault) AS d_fault,
           sum(d_alloc) AS d_alloc, sum(d_unalloc) AS d_unalloc
    FROM changes GROUP BY host, t
)
SELECT host, t, sum(d_present) AS d_present, sum(d_fault) AS d_fault,
       sum(d_alloc) AS d_alloc, sum(d_unalloc) AS d_unalloc
FROM (SELECT * FROM per_instant
      UNION ALL
      SELECT c.host, s.end_t, -sum(c.d_present), -sum(c.d_fault), -sum(c.d_alloc), -sum(c.d_unalloc)
      FROM per_instant AS c CROSS JOIN log_span AS s
      GROUP BY c.host, s.end_t)
GROUP BY host, t;

-- Each host as a step function, constant on [start_t, stop_t) (host_intervals).
CREATE OR REPLACE TEMP TABLE _derived_host_intervals AS
WITH running AS (
    SELECT host, t,
           sum(d_present) OVER w AS present_gpus, sum(d_fault) OVER w AS faults,
           sum(d_alloc) OVER w AS allocated_gpus, sum(d_unalloc) OVER w AS unallocated_gpus,
           lead(t) OVER w AS next_t, lead(host) OVER w AS next_host
    FROM _d_host_steps
    WINDOW w AS (ORDER BY host, t ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
)
SELECT s.run, host, t AS start_t, next_t AS stop_t,
       present_gpus::BIGINT AS present_gpus,
       faults > 0 AS faulty,
       allocated_gpus::BIGINT AS allocated_gpus,
       unallocated_gpus::BIGINT AS unallocated_gpus
FROM running CROSS JOIN log_span AS s
WHERE next_host = host AND next_t > t;

-- Hourly GPU-hour totals over all hosts (cluster_hours).
CREATE OR REPLACE TEMP TABLE _derived_cluster_hours AS
WITH split AS (
    SELECT i.*, greatest(i.present_gpus - i.allocated_gpus - i.unallocated_gpus, 0) AS free_gpus,
           unnest(range(hour_of(i.start_t), i.stop_t, 3600)) AS hour
    FROM _derived_host_intervals AS i
    WHERE i.present_gpus > 0
),
sized AS (
    SELECT split.*, (least(stop_t, hour + 3600) - greatest(start_t, hour)) / 3600.0 AS h, p.host_gpus
    FROM split CROSS JOIN policy AS p
)
SELECT run, hour,
       sum(present_gpus * h) AS total_gpu_h,
       sum(allocated_gpus * h) AS allocated_gpu_h,
       sum(unallocated_gpus * h) AS unallocated_gpu_h,
       sum(CASE WHEN faulty THEN free_gpus ELSE 0 END * h) AS unavailable_gpu_h,
       sum(CASE WHEN faulty THEN 0 ELSE free_gpus END * h) AS free_gpu_h,
       sum(CASE WHEN NOT faulty AND free_gpus > 0 AND free_gpus < host_gpus THEN free_gpus ELSE 0 END * h)
           AS fragmented_gpu_h
FROM sized
GROUP BY run, hour;

-- Owed vs received -----------------------------------------------------------------

-- Demand and received GPU-hours per team and hour (team_demand_by_hour).
CREATE OR REPLACE TEMP TABLE _derived_team_demand_by_hour AS
WITH deltas AS (
    SELECT team, submitted_at AS t, gpus AS d_demand, 0 AS d_received
    FROM _derived_workloads WHERE funded
    UNION ALL
    SELECT team, ended_at, -gpus, 0 FROM _derived_workloads WHERE funded AND ended_at IS NOT NULL
    UNION ALL
    SELECT team, start_at, 0, gpus FROM _derived_runs WHERE funded
    UNION ALL
    SELECT team, stop_at, 0, -gpus FROM _derived_runs WHERE funded AND stop_reason <> 'open'
),
per_hour AS (
    SELECT d.team, hour_of(d.t) AS hour,
           sum(d.d_demand) AS step_demand,
           sum(d.d_received) AS step_received,
           sum(d.d_demand * (least(hour_of(d.t) + 3600, s.end_t) - d.t)) AS tail_demand,
           sum(d.d_received * (least(hour_of(d.t) + 3600, s.end_t) - d.t)) AS tail_received
    FROM deltas AS d CROSS JOIN log_span AS s
    GROUP BY d.team, hour_of(d.t)
),
grid AS (
    SELECT h.run, k.team, h.hour, h.hour_s, p.step_demand, p.step_received,
           p.tail_demand, p.tail_received
    FROM (SELECT DISTINCT team FROM per_hour) AS k
    CROSS JOIN hours AS h
    LEFT JOIN per_hour AS p ON p.team IS NOT DISTINCT FROM k.team AND p.hour = h.hour
)
SELECT run, team, hour,
       (coalesce(sum(step_demand) OVER before, 0) * hour_s + coalesce(tail_demand, 0)) / 3600.0
           AS demand_gpu_h,
       (coalesce(sum(step_received) OVER before, 0) * hour_s + coalesce(tail_received, 0)) / 3600.0
           AS received_gpu_h
FROM grid
WINDOW before AS (PARTITION BY team ORDER BY hour ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING);
