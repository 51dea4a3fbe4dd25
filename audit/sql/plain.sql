-- The plain definitions of the views that read the derived_* tables.
--
-- load_log stores what these views compute in the derived_* tables, once per
-- run (audit/sql/derive.sql computes the same rows faster), and the views in
-- views.sql read those tables. The definitions below compute the same views
-- straight from the events, as the views did before the tables existed: they are
-- the specification the derived tables are checked against (see
-- tests/test_audit_derived.py), and a way to recompute a figure from the log
-- alone.
--
-- audit.load.create_plain_views(con) creates them as TEMP views of the same
-- names, which shadow the main ones for that connection: every view built on
-- them (preemptions, capacity_by_hour, owed_received, ...) is then computed from
-- the events too. Dropping the TEMP views (audit.load.drop_plain_views)
-- restores the fast path. These are slow on large logs (tens of seconds for ten
-- million events).

-- One row per accepted submission. A repeated identical submission (ignored by
-- the scheduler, so not rejected) does not count: the first one wins.
CREATE OR REPLACE TEMP VIEW workloads AS
WITH sub AS (
    SELECT run, workload, budget, "user", kind, gpus, hosts, min_runtime_s, resumable, priority,
           expected_duration_s, t AS submitted_at, id AS submit_event
    FROM accepted_events
    WHERE type = 'workload.submitted'
    QUALIFY row_number() OVER (PARTITION BY run, workload ORDER BY seq) = 1
),
counts AS (
    SELECT run, workload,
           min(t) FILTER (WHERE type = 'workload.started') AS first_started_at,
           count(*) FILTER (WHERE type = 'workload.started') AS runs,
           count(*) FILTER (WHERE type = 'workload.preempted') AS preemptions
    FROM lifecycle
    GROUP BY run, workload
),
-- The workload's last lifecycle event says where it stands at the end of the log.
last AS (
    SELECT l.run, l.workload, l.type, l.t, e.outcome, e.requeued
    FROM lifecycle AS l
    LEFT JOIN (SELECT run, seq, outcome, requeued FROM workload_events
               WHERE type IN ('workload.preempted', 'workload.finished')) AS e
        ON e.run = l.run AND e.seq = l.seq
    WHERE l.next_seq IS NULL
)
SELECT sub.run, sub.workload, sub.budget, team_of(sub.budget, p.team_depth) AS team,
       sub."user", sub.kind, sub.gpus, sub.hosts, sub.min_runtime_s, sub.resumable, sub.priority,
       sub.min_runtime_s > 0 AS funded, sub.expected_duration_s, sub.submit_event,
       sub.submitted_at, c.first_started_at,
       CASE WHEN last.type IN ('workload.finished', 'workload.cancelled')
                 OR (last.type = 'workload.preempted' AND NOT last.requeued)
            THEN last.t END AS ended_at,
       CASE last.type
            WHEN 'workload.finished' THEN last.outcome
            WHEN 'workload.cancelled' THEN 'cancelled'
            WHEN 'workload.started' THEN 'running'
            WHEN 'workload.preempted' THEN CASE WHEN last.requeued THEN 'pending' ELSE 'preempted' END
            ELSE 'pending' END AS status,
       coalesce(c.preemptions, 0) AS preemptions,
       coalesce(c.runs, 0) AS runs,
       c.first_started_at - sub.submitted_at AS first_wait_s
FROM sub
JOIN policy AS p USING (run)
LEFT JOIN counts AS c ON c.run = sub.run AND c.workload = sub.workload
LEFT JOIN last ON last.run = sub.run AND last.workload = sub.workload;

-- One row per run interval: a workload.started until the workload's next
-- preempted / finished / cancelled event, or the end of the log ('open').
CREATE OR REPLACE TEMP VIEW runs AS
SELECT l.run, l.workload, w.budget, w.team, w."user", w.kind, w.gpus, w.funded,
       b.allocated, b.protected_until,
       l.t AS start_at,
       coalesce(l.next_t, s.end_t) AS stop_at,
       coalesce(l.next_t, s.end_t) - l.t AS duration_s,
       CASE l.next_type
            WHEN 'workload.finished' THEN e.outcome
            WHEN 'workload.cancelled' THEN 'cancelled'
            WHEN 'workload.preempted' THEN 'preempted'
            ELSE 'open' END AS stop_reason,
       CASE WHEN l.next_type = 'workload.preempted' THEN e.reason END AS preempt_reason,
       e."by" AS preempted_by,
       e.requeued,
       b.placement,
       l.seq AS start_seq,
       l.next_seq AS stop_seq
FROM lifecycle AS l
JOIN workloads AS w USING (run, workload)
JOIN log_span AS s ON s.run = l.run
JOIN (SELECT run, seq, allocated, protected_until, placement FROM workload_events
      WHERE type = 'workload.started') AS b ON b.run = l.run AND b.seq = l.seq
LEFT JOIN (SELECT run, seq, reason, "by", requeued, outcome FROM workload_events
           WHERE type IN ('workload.preempted', 'workload.finished')) AS e
    ON e.run = l.run AND e.seq = l.next_seq
WHERE l.type = 'workload.started';

-- Per workload: the first queue wait, and the wait after each requeue
-- (preempted with requeued -> next start; NULL when it never restarted).
CREATE OR REPLACE TEMP VIEW waits AS
WITH requeues AS (
    SELECT l.run, l.workload,
           list(CASE WHEN l.next_type = 'workload.started' THEN l.next_t - l.t END ORDER BY l.seq)
               AS requeue_waits
    FROM lifecycle AS l
    JOIN workload_events AS e ON e.run = l.run AND e.seq = l.seq
    WHERE l.type = 'workload.preempted' AND e.requeued
    GROUP BY l.run, l.workload
)
SELECT w.run, w.workload, w.kind, w.gpus, w.hosts, w.funded, w.team, w.budget,
       w.submitted_at, w.first_started_at, w.first_wait_s,
       coalesce(r.requeue_waits, []::BIGINT[]) AS requeue_waits,
       coalesce(w.first_wait_s, s.end_t - w.submitted_at) AS wait_s,
       w.first_wait_s IS NULL AS censored,
       w.submitted_at < u.measured_from AS in_warmup
FROM workloads AS w
JOIN log_span AS s USING (run)
JOIN warmup AS u USING (run)
LEFT JOIN requeues AS r USING (run, workload);

-- Each host as a step function: GPUs present, whether it is faulty (faulted or
-- drained, awaiting repair), and GPUs held by allocated / unallocated runs,
-- constant on [start_t, stop_t).
--
-- The running totals go over one order per run, (host, t), rather than one
-- partition per host, which DuckDB computes about twice as slowly. Each host
-- gets a last change at the end of the log that brings its totals back to zero,
-- so the next host starts from zero too. Changes at the same instant are not
-- merged first: the interim levels between them last zero seconds, and those
-- empty intervals are dropped.
CREATE OR REPLACE TEMP VIEW host_intervals AS
WITH closed AS (
    SELECT run, host, t, d_present, d_fault, d_alloc, d_unalloc FROM host_changes
    UNION ALL
    SELECT c.run, c.host, s.end_t, -sum(c.d_present), -sum(c.d_fault), -sum(c.d_alloc),
           -sum(c.d_unalloc)
    FROM host_changes AS c JOIN log_span AS s USING (run)
    GROUP BY c.run, c.host, s.end_t
),
running AS (
    SELECT run, host, t,
           sum(d_present) OVER w AS present_gpus, sum(d_fault) OVER w AS faults,
           sum(d_alloc) OVER w AS allocated_gpus, sum(d_unalloc) OVER w AS unallocated_gpus,
           lead(t) OVER w AS next_t, lead(host) OVER w AS next_host
    FROM closed
    WINDOW w AS (PARTITION BY run ORDER BY host, t ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
)
SELECT run, host, t AS start_t, next_t AS stop_t,
       present_gpus::BIGINT AS present_gpus,
       faults > 0 AS faulty,
       allocated_gpus::BIGINT AS allocated_gpus,
       unallocated_gpus::BIGINT AS unallocated_gpus
FROM running
WHERE next_host = host AND next_t > t;

-- Hourly GPU-hour totals over all hosts (only hours where some host existed).
-- free = healthy and not held; fragmented = free GPUs on healthy hosts that
-- have fewer than host_gpus free, so cannot take a whole-host (8-GPU) job.
CREATE OR REPLACE TEMP VIEW cluster_hours AS
WITH split AS (
    SELECT i.*, greatest(i.present_gpus - i.allocated_gpus - i.unallocated_gpus, 0) AS free_gpus,
           unnest(range(hour_of(i.start_t), i.stop_t, 3600)) AS hour
    FROM host_intervals AS i
    WHERE i.present_gpus > 0
),
sized AS (
    SELECT split.*, (least(stop_t, hour + 3600) - greatest(start_t, hour)) / 3600.0 AS h, p.host_gpus
    FROM split JOIN policy AS p USING (run)
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

-- Per team and hour, GPU-hours of FUNDED workloads (min_runtime_s > 0,
-- whatever the policy): demand = pending or running (submission to end; a
-- requeue keeps it in demand), received = running; and the same over all of
-- the team's workloads, funded or not.
--
-- Integrated by hour from the changes alone, without ordering them: within an
-- hour [hs, he), the level is the level at hs (the sum of all earlier changes)
-- and a change d at t adds d x (he - t) GPU-seconds. Only the per-team hourly
-- sums need a running total, not the changes themselves.
CREATE OR REPLACE TEMP VIEW team_demand_by_hour AS
WITH deltas AS (
    SELECT run, team, funded, submitted_at AS t, gpus AS d_demand, 0 AS d_received
    FROM workloads
    UNION ALL
    SELECT run, team, funded, ended_at, -gpus, 0 FROM workloads WHERE ended_at IS NOT NULL
    UNION ALL
    SELECT run, team, funded, start_at, 0, gpus FROM runs
    UNION ALL
    SELECT run, team, funded, stop_at, 0, -gpus FROM runs WHERE stop_reason <> 'open'
),
per_hour AS (
    SELECT d.run, d.team, hour_of(d.t) AS hour,
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
    FROM deltas AS d JOIN log_span AS s USING (run)
    GROUP BY d.run, d.team, hour_of(d.t)
),
grid AS (
    SELECT h.run, k.team, h.hour, h.hour_s, p.step_demand, p.step_received,
           p.tail_demand, p.tail_received, p.step_demand_all, p.step_received_all,
           p.tail_demand_all, p.tail_received_all
    FROM (SELECT DISTINCT run, team FROM per_hour) AS k
    JOIN hours AS h USING (run)
    LEFT JOIN per_hour AS p ON p.run = h.run AND p.team = k.team AND p.hour = h.hour
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
WINDOW before AS (PARTITION BY run, team ORDER BY hour ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING);

-- Per team and hour: GPU-hours of FUNDED work (as received_gpu_h in
-- owed_received) that were idle holds (hold_gpu_h) and killed work
-- (killed_gpu_h: lost_run + since_checkpoint + restart), and the holds'
-- demand (hold_demand_gpu_h: from a hold's submission to its end, as
-- demand_gpu_h counts it). Only hours with some are listed. Complete, not
-- warm-up aware. Read by owed_received_net.
CREATE OR REPLACE TEMP VIEW unproductive_by_hour AS
WITH intervals AS (
    SELECT run, team, gpus, what, from_t, until_t FROM unproductive_runs WHERE funded
    UNION ALL
    SELECT w.run, w.team, w.gpus, 'hold_demand', w.submitted_at, coalesce(w.ended_at, s.end_t)
    FROM workloads AS w JOIN log_span AS s USING (run)
    WHERE w.funded AND w.kind = 'squat' AND coalesce(w.ended_at, s.end_t) > w.submitted_at
),
split AS (
    SELECT *, unnest(range(hour_of(from_t), until_t, 3600)) AS hour FROM intervals
)
SELECT run, team, hour,
       coalesce(sum(gpus * (least(until_t, hour + 3600) - greatest(from_t, hour)))
                    FILTER (WHERE what = 'idle_hold'), 0) / 3600.0 AS hold_gpu_h,
       coalesce(sum(gpus * (least(until_t, hour + 3600) - greatest(from_t, hour)))
                    FILTER (WHERE what NOT IN ('idle_hold', 'hold_demand')), 0) / 3600.0 AS killed_gpu_h,
       coalesce(sum(gpus * (least(until_t, hour + 3600) - greatest(from_t, hour)))
                    FILTER (WHERE what = 'hold_demand'), 0) / 3600.0 AS hold_demand_gpu_h
FROM split
GROUP BY run, team, hour;

-- One row per run preempted with requeue: the wait from the preemption to the
-- workload's next start (NULL restarted_at when it never restarted: wait_s is
-- then the censored end of log - preemption, and `censored` says so; a
-- workload cancelled while requeued is censored too). `in_warmup`: preempted
-- before the warm-up ended.
CREATE OR REPLACE TEMP VIEW requeue_waits AS
WITH nxt AS (
    SELECT run, workload, kind, gpus, funded, team, stop_at, stop_reason, requeued,
           lead(start_at) OVER (PARTITION BY run, workload ORDER BY start_seq) AS next_start
    FROM runs
)
SELECT n.run, n.workload, n.kind, n.gpus, n.funded, n.team,
       n.stop_at AS preempted_at, n.next_start AS restarted_at,
       coalesce(n.next_start, s.end_t) - n.stop_at AS wait_s,
       n.next_start IS NULL AS censored,
       n.stop_at < u.measured_from AS in_warmup
FROM nxt AS n
JOIN log_span AS s USING (run)
JOIN warmup AS u USING (run)
WHERE n.stop_reason = 'preempted' AND n.requeued;
