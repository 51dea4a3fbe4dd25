-- What load_log computes once per run and stores in the derived_* tables.
--
-- audit.load runs these statements in order, in one transaction, with
-- `events` shadowed by a TEMP view of one run's rows: every query here sees a
-- single run, and `run` is part of no key. Intermediate results are TEMP tables
-- named _d_<...>. A statement that creates _derived_<view> is not run as
-- written: its query goes straight into the table derived_<view> (replacing the
-- run's rows there), and _derived_<view> becomes a TEMP view of those stored
-- rows for the statements after it. Every TEMP object is dropped at the end.
-- (Over an empty run the statements run as written, and the column types of the
-- _derived_<view> tables they create are those of the derived_<view> tables.)
--
-- The results are exactly those of the plain definitions in plain.sql, the
-- views computed straight from the events (tests/test_audit_derived.py checks
-- it). Only the way of computing them differs:
--   * each kind of event is read once, into a narrow TEMP table;
--   * every workload gets an integer key, `wkey` (the seq of its first accepted
--     submission), so the sort that pairs each start with the workload's next
--     lifecycle event, and every join after it, are on integers; lifecycle
--     event types go through that sort as small integer codes;
--   * derived_runs keeps the workload's key, not its name, budget, team, ...
--     (the runs view joins them from derived_workloads);
--   * the per-host timeline runs on integer host ids, and sums the changes of
--     one host at one instant before its running sums (the plain view sorts
--     every change and drops the zero-length steps between them afterwards).
--
-- `at` and `by` are keywords in DuckDB 2 and are quoted where unqualified.

-- The run's span, policy and hours, read once (each reads the whole run).
CREATE OR REPLACE TEMP TABLE _d_span AS SELECT * FROM log_span;
CREATE OR REPLACE TEMP TABLE _d_policy AS SELECT * FROM policy;
CREATE OR REPLACE TEMP TABLE _d_hours AS SELECT * FROM hours;

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
                  ELSE 4 END)::UTINYINT AS code,
       CASE WHEN type IN ('workload.preempted', 'workload.finished') THEN requeued END AS requeued,
       CASE WHEN type IN ('workload.preempted', 'workload.finished') THEN outcome END AS outcome
FROM _d_accepted
WHERE type IN ('workload.submitted', 'workload.started', 'workload.preempted', 'workload.finished',
               'workload.cancelled');

-- Each submitted workload's key: the seq of its first accepted submission (a
-- re-sent identical submission does not count). Lifecycle events of a workload
-- that was never submitted belong to no row of workloads or runs.
CREATE OR REPLACE TEMP TABLE _d_key AS
SELECT workload, min(seq) AS wkey FROM _d_wev WHERE code = 0 GROUP BY workload;

-- Each lifecycle event with the same workload's next one (the lifecycle view),
-- carrying its own requeued and outcome (NULL unless preempted or finished).
CREATE OR REPLACE TEMP TABLE _d_life AS
SELECT wkey, seq, t, code, requeued, outcome,
       lead(seq) OVER w AS next_seq,
       lead(t) OVER w AS next_t,
       lead(code) OVER w AS next_code
FROM (SELECT k.wkey, e.seq, e.t, e.code, e.requeued, e.outcome
      FROM _d_wev AS e JOIN _d_key AS k USING (workload)
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
-- and its last lifecycle event (the one without a next), which says where it
-- stands at the end of the log.
CREATE OR REPLACE TEMP TABLE _d_per_workload AS
SELECT wkey,
       min(t) FILTER (WHERE code = 1) AS first_started_at,
       count(*) FILTER (WHERE code = 1) AS runs,
       count(*) FILTER (WHERE code = 2) AS preemptions,
       list(CASE WHEN next_code = 1 THEN next_t - t END ORDER BY seq)
           FILTER (WHERE code = 2 AND requeued) AS requeue_waits,
       max(code) FILTER (WHERE next_seq IS NULL) AS last_code,
       max(t) FILTER (WHERE next_seq IS NULL) AS last_t,
       max(outcome) FILTER (WHERE next_seq IS NULL) AS last_outcome,
       bool_or(requeued) FILTER (WHERE next_seq IS NULL) AS last_requeued
FROM _d_life
GROUP BY wkey;

CREATE OR REPLACE TEMP TABLE _derived_workloads AS
WITH teams AS (
    SELECT b.budget, team_of(b.budget, p.team_depth) AS team
    FROM (SELECT DISTINCT budget FROM _d_sub) AS b CROSS JOIN _d_policy AS p
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
CROSS JOIN _d_policy AS p
LEFT JOIN teams AS tm ON tm.budget IS NOT DISTINCT FROM sub.budget
LEFT JOIN _d_per_workload AS c USING (wkey);

-- One row per run interval: a start until the workload's next lifecycle event.
-- The workload's own columns (name, budget, team, ...) are not repeated here:
-- the runs view joins them from derived_workloads by wkey.
CREATE OR REPLACE TEMP TABLE _derived_runs AS
SELECT s.run, l.wkey, b.allocated, b.protected_until,
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
CROSS JOIN _d_span AS s
JOIN (SELECT seq, allocated, protected_until, placement FROM _d_accepted
      WHERE type = 'workload.started') AS b ON b.seq = l.seq
LEFT JOIN _d_stop AS e ON e.seq = l.next_seq
WHERE l.code = 1;

-- Hosts ------------------------------------------------------------------------------

-- Runs unnested by placement (run_slots).
CREATE OR REPLACE TEMP TABLE _d_slots AS
SELECT start_at, stop_at, stop_reason, allocated, slot.host AS host, slot.gpus AS gpus
FROM (SELECT start_at, stop_at, stop_reason, allocated, unnest(placement) AS slot FROM _derived_runs);

-- Host names as small integers (hid), in name order. A NULL host has no
-- intervals (the plain view drops them too).
CREATE OR REPLACE TEMP TABLE _d_hosts AS
SELECT host, row_number() OVER (ORDER BY host) AS hid
FROM (SELECT host FROM _d_slots UNION
      SELECT host FROM _d_accepted WHERE type IN ('host.added', 'host.removed', 'host.faulted',
                                                  'host.drained', 'host.repaired'))
WHERE host IS NOT NULL;

-- Every change to a host (as in host_changes), per host and instant: GPUs taken
-- and given back by runs summed per instant, and the rare membership and fault
-- changes. The same instant may appear twice for a host; the running sums below
-- then pass through a zero-length step, which is dropped like any other.
CREATE OR REPLACE TEMP TABLE _d_host_steps AS
WITH membership AS (
    SELECT host, t, type, gpus,
           last_value(gpus IGNORE NULLS) OVER (PARTITION BY host ORDER BY seq
                                               ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS size
    FROM _d_accepted
    WHERE type IN ('host.added', 'host.removed')
),
rare AS (
    SELECT host, t, CASE WHEN type = 'host.added' THEN gpus ELSE -size END AS d_present, 0 AS d_fault
    FROM membership
    UNION ALL
    SELECT host, faulted_at, 0, 1 FROM host_faults
    UNION ALL
    SELECT host, coalesce(repaired_at, removed_at), 0, -1 FROM host_faults
    WHERE coalesce(repaired_at, removed_at) IS NOT NULL
),
held AS (
    SELECT h.hid, c.t, sum(c.d_alloc)::BIGINT AS d_alloc, sum(c.d_unalloc)::BIGINT AS d_unalloc
    FROM (SELECT host, start_at AS t,
                 CASE WHEN allocated THEN gpus ELSE 0 END AS d_alloc,
                 CASE WHEN allocated THEN 0 ELSE gpus END AS d_unalloc
          FROM _d_slots
          UNION ALL
          SELECT host, stop_at,
                 CASE WHEN allocated THEN -gpus ELSE 0 END, CASE WHEN allocated THEN 0 ELSE -gpus END
          FROM _d_slots WHERE stop_reason <> 'open') AS c
    JOIN _d_hosts AS h USING (host)
    GROUP BY h.hid, c.t
)
SELECT hid, t, 0::BIGINT AS d_present, 0::BIGINT AS d_fault, d_alloc, d_unalloc FROM held
UNION ALL
SELECT h.hid, r.t, r.d_present, r.d_fault, 0, 0 FROM rare AS r JOIN _d_hosts AS h USING (host);

-- Each host as a step function, constant on [start_t, stop_t) (host_intervals):
-- running sums over the steps in (host, t) order, with a last step at the end of
-- the log that brings each host back to zero (so the next host starts at zero).
-- A step before the end of the log is always followed by a step of the same host
-- (at the latest, that last one), so `t < end_t` stands for "the next step is
-- the same host's".
CREATE OR REPLACE TEMP TABLE _derived_host_intervals AS
WITH closed AS (
    SELECT hid, t, d_present, d_fault, d_alloc, d_unalloc FROM _d_host_steps
    UNION ALL
    SELECT c.hid, s.end_t, -sum(c.d_present), -sum(c.d_fault), -sum(c.d_alloc), -sum(c.d_unalloc)
    FROM _d_host_steps AS c CROSS JOIN _d_span AS s
    GROUP BY c.hid, s.end_t
),
running AS (
    SELECT hid, t,
           sum(d_present) OVER w AS present_gpus, sum(d_fault) OVER w AS faults,
           sum(d_alloc) OVER w AS allocated_gpus, sum(d_unalloc) OVER w AS unallocated_gpus,
           lead(t) OVER w AS next_t
    FROM closed
    WINDOW w AS (ORDER BY hid, t ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
)
SELECT s.run, h.host, r.t AS start_t, r.next_t AS stop_t,
       r.present_gpus::BIGINT AS present_gpus,
       r.faults > 0 AS faulty,
       r.allocated_gpus::BIGINT AS allocated_gpus,
       r.unallocated_gpus::BIGINT AS unallocated_gpus
FROM running AS r
JOIN _d_hosts AS h USING (hid)
CROSS JOIN _d_span AS s
WHERE r.t < s.end_t AND r.next_t > r.t;

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
    FROM split CROSS JOIN _d_policy AS p
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

-- Demand and received GPU-hours per team and hour (team_demand_by_hour): of
-- funded workloads, and of all workloads.
CREATE OR REPLACE TEMP TABLE _derived_team_demand_by_hour AS
WITH team_runs AS (
    SELECT w.team, w.gpus, w.funded, r.start_at, r.stop_at, r.stop_reason
    FROM _derived_runs AS r JOIN _derived_workloads AS w USING (wkey)
),
deltas AS (
    SELECT team, submitted_at AS t, funded, gpus AS d_demand, 0 AS d_received
    FROM _derived_workloads
    UNION ALL
    SELECT team, ended_at, funded, -gpus, 0 FROM _derived_workloads WHERE ended_at IS NOT NULL
    UNION ALL
    SELECT team, start_at, funded, 0, gpus FROM team_runs
    UNION ALL
    SELECT team, stop_at, funded, 0, -gpus FROM team_runs WHERE stop_reason <> 'open'
),
per_hour AS (
    SELECT d.team, hour_of(d.t) AS hour,
           sum(d.d_demand) FILTER (WHERE d.funded) AS step_demand,
           sum(d.d_received) FILTER (WHERE d.funded) AS step_received,
           sum(d.d_demand * (least(hour_of(d.t) + 3600, s.end_t) - d.t)) FILTER (WHERE d.funded)
               AS tail_demand,
           sum(d.d_received * (least(hour_of(d.t) + 3600, s.end_t) - d.t)) FILTER (WHERE d.funded)
               AS tail_received,
           sum(d.d_demand) AS step_demand_all,
           sum(d.d_received) AS step_received_all,
           sum(d.d_demand * (least(hour_of(d.t) + 3600, s.end_t) - d.t)) AS tail_demand_all,
           sum(d.d_received * (least(hour_of(d.t) + 3600, s.end_t) - d.t)) AS tail_received_all
    FROM deltas AS d CROSS JOIN _d_span AS s
    GROUP BY d.team, hour_of(d.t)
),
grid AS (
    SELECT h.run, k.team, h.hour, h.hour_s, p.step_demand, p.step_received,
           p.tail_demand, p.tail_received, p.step_demand_all, p.step_received_all,
           p.tail_demand_all, p.tail_received_all
    FROM (SELECT DISTINCT team FROM per_hour) AS k
    CROSS JOIN _d_hours AS h
    LEFT JOIN per_hour AS p ON p.team = k.team AND p.hour = h.hour
)
SELECT run, team, hour,
       (coalesce(sum(step_demand) OVER before, 0) * hour_s + coalesce(tail_demand, 0)) / 3600.0
           AS demand_gpu_h,
       (coalesce(sum(step_received) OVER before, 0) * hour_s + coalesce(tail_received, 0)) / 3600.0
           AS received_gpu_h,
       (coalesce(sum(step_demand_all) OVER before, 0) * hour_s + coalesce(tail_demand_all, 0)) / 3600.0
           AS demand_all_gpu_h,
       (coalesce(sum(step_received_all) OVER before, 0) * hour_s + coalesce(tail_received_all, 0))
           / 3600.0 AS received_all_gpu_h
FROM grid
WINDOW before AS (PARTITION BY team ORDER BY hour ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING);

-- Received net of idle holds and killed work ------------------------------------------

-- Per team and hour: funded GPU-hours of idle holds, of killed work, and the
-- holds' demand (unproductive_by_hour, from unproductive_runs). As the plain
-- view, but each workload's runs are ordered on its integer key.
CREATE OR REPLACE TEMP TABLE _derived_unproductive_by_hour AS
WITH spec AS (
    SELECT id AS submit_event,
           arg_min(checkpoint_interval_s, seq) AS checkpoint_interval_s,
           arg_min(restart_overhead_s, seq) AS restart_overhead_s
    FROM events WHERE type = 'workload.submitted'
    GROUP BY id
),
r AS (
    SELECT w.team, w.kind, w.gpus, w.funded, r.start_at, r.stop_at, r.duration_s, r.stop_reason,
           r.requeued,
           coalesce(lag(r.stop_reason = 'preempted' AND coalesce(r.requeued, false))
                        OVER (PARTITION BY r.wkey ORDER BY r.start_seq), false) AS resumed,
           coalesce(s.checkpoint_interval_s, 0) AS checkpoint_s,
           coalesce(s.restart_overhead_s, 0) AS restart_s
    FROM _derived_runs AS r
    JOIN _derived_workloads AS w USING (wkey)
    LEFT JOIN spec AS s ON s.submit_event = w.submit_event
),
parts AS (
    SELECT *,
           CASE WHEN resumed THEN least(restart_s, duration_s) ELSE 0 END AS head_s,
           CASE WHEN stop_reason <> 'preempted' THEN 0
                WHEN NOT coalesce(requeued, false) THEN duration_s
                WHEN checkpoint_s > 0 THEN duration_s % checkpoint_s
                ELSE 0 END AS tail_s
    FROM r WHERE kind IS DISTINCT FROM 'squat'
),
intervals AS (
    SELECT team, gpus, 'idle_hold' AS what, start_at AS from_t, stop_at AS until_t
    FROM r WHERE funded AND kind = 'squat' AND stop_at > start_at
    UNION ALL
    SELECT team, gpus, 'restart', start_at, start_at + head_s FROM parts WHERE funded AND head_s > 0
    UNION ALL
    SELECT team, gpus, CASE WHEN coalesce(requeued, false) THEN 'since_checkpoint' ELSE 'lost_run' END,
           stop_at - least(tail_s, duration_s - head_s), stop_at
    FROM parts WHERE funded AND least(tail_s, duration_s - head_s) > 0
    UNION ALL
    SELECT w.team, w.gpus, 'hold_demand', w.submitted_at, coalesce(w.ended_at, s.end_t)
    FROM _derived_workloads AS w CROSS JOIN _d_span AS s
    WHERE w.funded AND w.kind = 'squat' AND coalesce(w.ended_at, s.end_t) > w.submitted_at
),
split AS (
    SELECT *, unnest(range(hour_of(from_t), until_t, 3600)) AS hour FROM intervals
)
SELECT s.run, split.team, split.hour,
       coalesce(sum(gpus * (least(until_t, hour + 3600) - greatest(from_t, hour)))
                    FILTER (WHERE what = 'idle_hold'), 0) / 3600.0 AS hold_gpu_h,
       coalesce(sum(gpus * (least(until_t, hour + 3600) - greatest(from_t, hour)))
                    FILTER (WHERE what NOT IN ('idle_hold', 'hold_demand')), 0) / 3600.0 AS killed_gpu_h,
       coalesce(sum(gpus * (least(until_t, hour + 3600) - greatest(from_t, hour)))
                    FILTER (WHERE what = 'hold_demand'), 0) / 3600.0 AS hold_demand_gpu_h
FROM split CROSS JOIN _d_span AS s
GROUP BY s.run, split.team, split.hour;

-- Waits of requeued runs (requeue_waits, but in_warmup, which the view adds):
-- each run preempted with requeue, and the start of the workload's next run.
CREATE OR REPLACE TEMP TABLE _derived_requeue_waits AS
WITH nxt AS (
    SELECT wkey, stop_at, stop_reason, requeued,
           lead(start_at) OVER (PARTITION BY wkey ORDER BY start_seq) AS next_start
    FROM _derived_runs
)
SELECT s.run, n.wkey, n.stop_at AS preempted_at, n.next_start AS restarted_at,
       coalesce(n.next_start, s.end_t) - n.stop_at AS wait_s,
       n.next_start IS NULL AS censored
FROM nxt AS n CROSS JOIN _d_span AS s
WHERE n.stop_reason = 'preempted' AND n.requeued;
