-- The audit's views over the `events` table (see docs/audit.md for every column).
--
-- Conventions, for every view:
--   * everything is partitioned by `run` (one loaded log = one run);
--   * time is `t`, the scheduler's clock (running max of `at` in log order),
--     and ties are broken by `seq` (log order), never by `at`;
--   * GPU-hours are DOUBLE: GPUs x seconds / 3600, per hour;
--   * hours are clipped to the log span, so the first and last hour of a run
--     can be shorter than 3600 s (`hour_s` says how long).
--
-- Quantities that change at events (GPUs held on a host, a team's demand, a
-- node's usage) are step functions, given as +n/-n changes at instants. They
-- are integrated per hour in one of two ways, both exact:
--   * where the level itself matters (is a host partly free?), a running sum
--     in time order gives the level on each interval between changes, and the
--     intervals are split at hour boundaries;
--   * where only hourly totals matter, no ordering is needed: within an hour
--     [hs, he) the level is the sum of all earlier changes, and a change d at t
--     adds d x (he - t) GPU-seconds, so hourly sums plus a running total over
--     the hours suffice (see team_demand_by_hour).
-- Either way the work is proportional to the events, not to events x hours.
--
-- Derived tables. The views that need a sort over the whole log (pairing each
-- start with the workload's next lifecycle event; each host's timeline) and
-- the hourly totals built on them are computed once per run, when the log is
-- loaded, into the tables derived_workloads, derived_runs,
-- derived_host_intervals, derived_cluster_hours and
-- derived_team_demand_by_hour (audit/sql/derive.sql); so are the facts every
-- report needs from a window over each workload's runs (derived_unproductive_by_hour,
-- derived_requeue_waits). The views workloads, runs, waits, host_intervals,
-- cluster_hours, team_demand_by_hour, unproductive_by_hour and requeue_waits
-- read those tables; their plain definitions, straight from the events, are in
-- audit/sql/plain.sql. Every other view is computed when it is read.
--
-- This file is run in two parts: everything above the line `-- @derived` is
-- what derive.sql reads; audit.load creates the derived tables between the two
-- parts, so the views below can read them.
--
-- `at` and `by` are keywords in DuckDB 2 and are quoted where unqualified.

-- Helpers --------------------------------------------------------------------

-- Start of the hour containing ts (Unix seconds; correct for negatives too).
CREATE OR REPLACE MACRO hour_of(ts) AS ts - ((ts % 3600) + 3600) % 3600;

-- The first depth+1 segments of a budget path: the team a budget belongs to.
CREATE OR REPLACE MACRO team_of(budget, depth) AS
    array_to_string(list_slice(string_split(budget, '/'), 1, depth + 1), '/');

-- A budget node's parent path, NULL for the root.
CREATE OR REPLACE MACRO parent_of(node) AS nullif(regexp_replace(node, '/[^/]*$', ''), node);

-- The log ------------------------------------------------------------------------

-- First and last clock time of each run, over every event (rejected ones too).
CREATE OR REPLACE VIEW log_span AS
SELECT run, min(t) AS start_t, max(t) AS end_t, count(*) AS events
FROM events
GROUP BY run;

-- Every hour a run covers, clipped to its span (a log spanning no time has none).
CREATE OR REPLACE VIEW hours AS
SELECT run, hour,
       greatest(hour, start_t) AS hour_start,
       least(hour + 3600, end_t) AS hour_end,
       least(hour + 3600, end_t) - greatest(hour, start_t) AS hour_s
FROM (SELECT run, start_t, end_t, unnest(range(hour_of(start_t), end_t, 3600)) AS hour
      FROM log_span)
WHERE least(hour + 3600, end_t) > greatest(hour, start_t);

-- Events minus the inputs the scheduler rejected: a rejected input had no effect.
CREATE OR REPLACE VIEW accepted_events AS
SELECT e.*
FROM events AS e
ANTI JOIN (SELECT run, cause FROM events
           WHERE type IN ('workload.rejected', 'budget.edit_rejected', 'input.rejected')) AS r
    ON e.run = r.run AND e.id = r.cause;

-- The knobs each run ended with: its latest accepted policy.configured, or the
-- PolicyConfigured defaults when the log has none. The knob list is generated
-- from events.PolicyConfigured by audit.load.create_views (it fills the
-- placeholder below), so a new knob appears here without editing this file.
CREATE OR REPLACE VIEW policy AS
SELECT s.run,
       {policy_knobs},
       p.t AS configured_at,
       p.id AS policy_event
FROM log_span AS s
LEFT JOIN (SELECT * FROM accepted_events WHERE type = 'policy.configured'
           QUALIFY row_number() OVER (PARTITION BY run ORDER BY seq DESC) = 1) AS p
    USING (run);

-- Budgets ----------------------------------------------------------------------------

-- Every accepted budget node, where it sits, and its initial share.
CREATE OR REPLACE VIEW budget_nodes AS
SELECT run, path AS node, parent_of(path) AS parent,
       len(string_split(path, '/')) - 1 AS depth,
       t AS defined_at, managers, shares AS initial_shares
FROM accepted_events
WHERE type = 'budget.node_defined';

-- Each share change: a node's definition, or one child of a shares_set (a
-- partial update: children not listed keep their shares).
CREATE OR REPLACE VIEW share_changes AS
SELECT run, seq, t, path AS node, shares
FROM accepted_events
WHERE type = 'budget.node_defined'
UNION ALL
SELECT run, seq, t, parent || '/' || cs.child AS node, cs.shares
FROM (SELECT run, seq, t, parent, unnest(child_shares) AS cs
      FROM accepted_events WHERE type = 'budget.shares_set');

-- Each node's fraction of the cluster, as a step function: valid from
-- `valid_from` until `valid_until` (NULL = end of log). The fraction is the
-- product of share / sum-of-sibling-shares along the path; the root holds 1.
CREATE OR REPLACE VIEW entitlement_changes AS
WITH RECURSIVE
points AS (SELECT DISTINCT run, t FROM share_changes),
-- The tree as it stood after the last edit at each change point.
tree AS (
    SELECT p.run, p.t AS valid_from, c.node, arg_max(c.shares, c.seq) AS shares
    FROM points AS p JOIN share_changes AS c ON c.run = p.run AND c.t <= p.t
    GROUP BY p.run, p.t, c.node
),
local_share AS (
    SELECT run, valid_from, node, parent_of(node) AS parent,
           coalesce(shares / nullif(sum(shares) OVER (PARTITION BY run, valid_from, parent_of(node)), 0),
                    0) AS local_fraction
    FROM tree
),
fraction AS (
    SELECT run, valid_from, node, 1.0::DOUBLE AS fraction
    FROM local_share WHERE parent IS NULL
    UNION ALL
    SELECT l.run, l.valid_from, l.node, f.fraction * l.local_fraction
    FROM fraction AS f
    JOIN local_share AS l ON l.run = f.run AND l.valid_from = f.valid_from AND l.parent = f.node
)
SELECT run, node, valid_from,
       lead(valid_from) OVER (PARTITION BY run, node ORDER BY valid_from) AS valid_until,
       fraction
FROM fraction;

-- Each node's time-weighted mean fraction of the cluster per hour (0 before it exists).
CREATE OR REPLACE VIEW entitlement_by_hour AS
WITH split AS (
    SELECT run, node, fraction, valid_from, stop_t,
           unnest(range(hour_of(valid_from), stop_t, 3600)) AS hour
    FROM (SELECT e.*, coalesce(e.valid_until, s.end_t) AS stop_t
          FROM entitlement_changes AS e JOIN log_span AS s USING (run))
    WHERE stop_t > valid_from
),
weighted AS (
    SELECT run, node, hour,
           sum(fraction * (least(stop_t, hour + 3600) - greatest(valid_from, hour))) AS fraction_s
    FROM split GROUP BY run, node, hour
)
SELECT h.run, n.node, h.hour, coalesce(w.fraction_s, 0) / h.hour_s AS fraction
FROM (SELECT DISTINCT run, node FROM budget_nodes) AS n
JOIN hours AS h USING (run)
LEFT JOIN weighted AS w ON w.run = h.run AND w.node = n.node AND w.hour = h.hour;

-- Workload events ------------------------------------------------------------------------

-- Accepted lifecycle events of workloads (everything after the submission).
CREATE OR REPLACE VIEW workload_events AS
SELECT run, seq, t, id, cause, type, workload, placement, allocated, protected_until,
       reason, "by", requeued, outcome
FROM accepted_events
WHERE type IN ('workload.started', 'workload.preempted', 'workload.finished', 'workload.cancelled');

-- Each lifecycle event with the same workload's next one (NULLs when it is the
-- last). The plain definitions of workloads, runs and waits read this one sort
-- (derive.sql computes the same pairing on integer keys); it is computed when
-- read, so on a large log it takes seconds.
CREATE OR REPLACE VIEW lifecycle AS
SELECT run, workload, seq, t, type,
       lead(seq) OVER w AS next_seq,
       lead(t) OVER w AS next_t,
       lead(type) OVER w AS next_type
FROM workload_events
WINDOW w AS (PARTITION BY run, workload ORDER BY seq);

-- Host faults ----------------------------------------------------------------------------

-- One row per fault episode: the first host.faulted after the host was healthy,
-- until host.repaired (or host.removed). Later faults in the same episode only
-- escalate its severity.
CREATE OR REPLACE VIEW host_faults AS
WITH numbered AS (
    SELECT run, host, seq, t, type, severity, reason,
           coalesce(sum(CASE WHEN type IN ('host.repaired', 'host.removed') THEN 1 ELSE 0 END)
                    OVER (PARTITION BY run, host ORDER BY seq
                          ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0)::BIGINT AS episode
    FROM accepted_events
    WHERE type IN ('host.faulted', 'host.drained', 'host.repaired', 'host.removed')
)
SELECT run, host, episode,
       CASE WHEN bool_or(severity = 'failed') THEN 'failed' ELSE 'degraded' END AS severity,
       arg_min(reason, seq) FILTER (WHERE type = 'host.faulted') AS reason,
       count(*) FILTER (WHERE type = 'host.faulted') AS faults,
       min(t) FILTER (WHERE type = 'host.faulted') AS faulted_at,
       min(t) FILTER (WHERE type = 'host.drained') AS drained_at,
       min(t) FILTER (WHERE type = 'host.repaired') AS repaired_at,
       min(t) FILTER (WHERE type = 'host.removed') AS removed_at,
       min(t) FILTER (WHERE type = 'host.drained') - min(t) FILTER (WHERE type = 'host.faulted') AS drain_s
FROM numbered
GROUP BY run, host, episode
HAVING count(*) FILTER (WHERE type = 'host.faulted') > 0;

-- @derived ----------------------------------------------------------------------------------
-- The derived_* tables exist from here on (see audit/sql/derive.sql).

-- The warm-up -----------------------------------------------------------------------------

-- Every run starts cold: empty usage windows, an empty queue. The figures leave
-- out its first `warmup_s` seconds: by default one lookback window (the
-- policy's `window_s`) if the log is longer than that, else nothing (a log
-- shorter than its window is measured from its start: `window_skipped`), or
-- the value of the SQL variable `allot_warmup_s` (`SET VARIABLE
-- allot_warmup_s = 0` keeps everything; `allot audit report --warmup-s`,
-- `summary(..., warmup_s=)` set it). The measured part starts at
-- `measured_from`: the first whole hour at or after start + warmup_s (so
-- hourly figures split cleanly), or the log's start when warmup_s is 0.
CREATE OR REPLACE VIEW warmup AS
WITH w AS (
    SELECT s.run, s.start_t, s.end_t,
           coalesce(getvariable('allot_warmup_s')::BIGINT,
                    CASE WHEN s.end_t - s.start_t > p.window_s THEN p.window_s ELSE 0 END)
               AS warmup_s,
           getvariable('allot_warmup_s') IS NULL AND s.end_t - s.start_t <= p.window_s
               AND p.window_s > 0 AS window_skipped
    FROM log_span AS s JOIN policy AS p USING (run)
)
SELECT run, warmup_s, window_skipped,
       CASE WHEN warmup_s <= 0 THEN start_t ELSE hour_of(start_t + warmup_s + 3599) END AS measured_from,
       greatest(end_t - CASE WHEN warmup_s <= 0 THEN start_t
                             ELSE hour_of(start_t + warmup_s + 3599) END, 0) AS measured_s
FROM w;

-- Workloads ------------------------------------------------------------------------------

-- One row per accepted submission. A repeated identical submission (ignored by
-- the scheduler, so not rejected) does not count: the first one wins. Stored
-- per run in derived_workloads (plain definition: plain.sql).
CREATE OR REPLACE VIEW workloads AS
SELECT run, workload, budget, team, "user", kind, gpus, hosts, min_runtime_s, resumable, priority,
       funded, expected_duration_s, submit_event, submitted_at, first_started_at, ended_at, status,
       preemptions, runs, first_wait_s
FROM derived_workloads;

-- One row per run interval: a workload.started until the workload's next
-- preempted / finished / cancelled event, or the end of the log ('open').
-- Stored per run in derived_runs, which keeps only the workload's key; its
-- name, budget, team, ... come from derived_workloads (plain definition:
-- plain.sql).
CREATE OR REPLACE VIEW runs AS
SELECT r.run, w.workload, w.budget, w.team, w."user", w.kind, w.gpus, w.funded, r.allocated,
       r.protected_until, r.start_at, r.stop_at, r.duration_s, r.stop_reason, r.preempt_reason,
       r.preempted_by, r.requeued, r.placement, r.start_seq, r.stop_seq
FROM derived_runs AS r
JOIN derived_workloads AS w USING (run, wkey);

-- Teams: nodes at the policy's team_depth, plus the team of any workload whose
-- budget is shallower than that depth (it is then its own team).
CREATE OR REPLACE VIEW teams AS
SELECT n.run, n.node AS team
FROM budget_nodes AS n JOIN policy AS p USING (run)
WHERE n.depth = p.team_depth
UNION
SELECT run, team FROM workloads;

-- Runs unnested by placement: one row per host a run held GPUs on.
CREATE OR REPLACE VIEW run_slots AS
SELECT run, workload, slot.host AS host, slot.gpus AS gpus, start_at, stop_at, allocated,
       team, budget, protected_until, stop_reason
FROM (SELECT *, unnest(placement) AS slot FROM runs);

-- Waits ---------------------------------------------------------------------------------

-- Per workload: the first queue wait, and the wait after each requeue
-- (preempted with requeued -> next start; NULL when it never restarted).
-- A workload that never started has no first wait (first_wait_s NULL) but has
-- waited at least until the end of the log: wait_s is that censored value
-- (end of log - submission) and `censored` says so. `in_warmup`: submitted
-- before the warm-up ended. Stored per run in derived_workloads (plain
-- definition: plain.sql); wait_s, censored and in_warmup are computed here.
CREATE OR REPLACE VIEW waits AS
SELECT w.run, w.workload, w.kind, w.gpus, w.hosts, w.funded, w.team, w.budget, w.submitted_at,
       w.first_started_at, w.first_wait_s, w.requeue_waits,
       coalesce(w.first_wait_s, s.end_t - w.submitted_at) AS wait_s,
       w.first_wait_s IS NULL AS censored,
       w.submitted_at < u.measured_from AS in_warmup
FROM derived_workloads AS w
JOIN log_span AS s USING (run)
JOIN warmup AS u USING (run);

-- First-wait percentiles per kind and over all kinds ('all'), over the
-- workloads submitted after the warm-up (warm-up aware). A workload that never
-- started counts with its censored wait (end of log - submission, a lower
-- bound): p50, p90, p99, mean and max are over every workload, and a
-- `*_censored` flag says the figure is only a lower bound because it depends
-- on a censored wait (a quantile is exact when it stays the same with every
-- censored wait made infinitely long). The old figures, over the workloads
-- that started only, keep their own names: p50_started ... max_started.
CREATE OR REPLACE VIEW wait_percentiles AS
SELECT run,
       CASE WHEN grouping(kind) = 1 THEN 'all' ELSE kind END AS kind,
       count(*) AS n,
       count(first_wait_s) AS started,
       count(*) - count(first_wait_s) AS never_started,
       quantile_cont(wait_s, 0.5) AS p50,
       quantile_cont(wait_s, 0.9) AS p90,
       quantile_cont(wait_s, 0.99) AS p99,
       avg(wait_s) AS mean,
       max(wait_s) AS max,
       quantile_cont(wait_s, 0.5) IS DISTINCT FROM quantile_cont(capped, 0.5) AS p50_censored,
       quantile_cont(wait_s, 0.9) IS DISTINCT FROM quantile_cont(capped, 0.9) AS p90_censored,
       quantile_cont(wait_s, 0.99) IS DISTINCT FROM quantile_cont(capped, 0.99) AS p99_censored,
       coalesce(bool_or(censored), false) AS mean_censored,
       coalesce(max(wait_s) FILTER (WHERE censored)
                >= coalesce(max(wait_s) FILTER (WHERE NOT censored), -1), false) AS max_censored,
       quantile_cont(first_wait_s, 0.5) AS p50_started,
       quantile_cont(first_wait_s, 0.9) AS p90_started,
       quantile_cont(first_wait_s, 0.99) AS p99_started,
       avg(first_wait_s) AS mean_started,
       max(first_wait_s) AS max_started
FROM (SELECT *, CASE WHEN censored THEN 1e18 ELSE wait_s END AS capped FROM waits WHERE NOT in_warmup)
GROUP BY GROUPING SETS ((run, kind), (run));

-- The largest gangs: per run, every funded workload of the largest GPU count
-- submitted after the warm-up (warm-up aware), started or not. Waits are
-- first waits, censored ones included as in wait_percentiles; `started` and
-- `never_started` say how many of them ever ran. max_wait_started_s is the
-- old figure, over the ones that started only.
CREATE OR REPLACE VIEW largest_gang_waits AS
WITH measured AS (
    SELECT *, CASE WHEN censored THEN 1e18 ELSE wait_s END AS capped
    FROM waits WHERE funded AND NOT in_warmup
),
largest AS (SELECT run, max(gpus) AS gpus FROM measured GROUP BY run)
SELECT run, gpus,
       any_value(hosts) AS hosts,
       count(*) AS workloads,
       count(first_wait_s) AS started,
       count(*) - count(first_wait_s) AS never_started,
       max(wait_s) AS max_wait_s,
       coalesce(max(wait_s) FILTER (WHERE censored)
                >= coalesce(max(wait_s) FILTER (WHERE NOT censored), -1), false) AS max_wait_censored,
       quantile_cont(wait_s, 0.5) AS p50_wait_s,
       quantile_cont(wait_s, 0.5) IS DISTINCT FROM quantile_cont(capped, 0.5) AS p50_wait_censored,
       max(first_wait_s) AS max_wait_started_s
FROM measured JOIN largest USING (run, gpus)
GROUP BY run, gpus;

-- Preemptions --------------------------------------------------------------------------

-- Per reason: how many runs were preempted, how many went back to the queue,
-- and the GPU-hours of work lost (whole run x GPUs for victims that were not
-- requeued; a requeued victim resumes, so it loses nothing here). Warm-up
-- aware: only preemptions at or after the warm-up's end count.
CREATE OR REPLACE VIEW preemptions AS
SELECT r.run, r.preempt_reason AS reason,
       count(*) AS count,
       count(*) FILTER (WHERE r.requeued) AS requeued,
       coalesce(sum(CASE WHEN r.requeued THEN 0 ELSE r.gpus * r.duration_s END), 0) / 3600.0
           AS gpu_hours_lost
FROM runs AS r JOIN warmup AS u USING (run)
WHERE r.stop_reason = 'preempted' AND r.stop_at >= u.measured_from
GROUP BY r.run, r.preempt_reason;

-- Hosts ---------------------------------------------------------------------------------

-- Every change to a host: GPUs added (host.added) or taken away (host.removed),
-- a fault episode starting (+1) or ending (-1), GPUs taken or given back by
-- allocated / unallocated runs.
CREATE OR REPLACE VIEW host_changes AS
WITH membership AS (
    SELECT run, host, t, type, gpus,
           last_value(gpus IGNORE NULLS) OVER (PARTITION BY run, host ORDER BY seq
                                               ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS size
    FROM accepted_events
    WHERE type IN ('host.added', 'host.removed')
)
SELECT run, host, t, CASE WHEN type = 'host.added' THEN gpus ELSE -size END AS d_present,
       0 AS d_fault, 0 AS d_alloc, 0 AS d_unalloc
FROM membership
UNION ALL
SELECT run, host, faulted_at, 0, 1, 0, 0 FROM host_faults
UNION ALL
SELECT run, host, coalesce(repaired_at, removed_at), 0, -1, 0, 0 FROM host_faults
WHERE coalesce(repaired_at, removed_at) IS NOT NULL
UNION ALL
SELECT run, host, start_at, 0, 0,
       CASE WHEN allocated THEN gpus ELSE 0 END, CASE WHEN allocated THEN 0 ELSE gpus END
FROM run_slots
UNION ALL
SELECT run, host, stop_at, 0, 0,
       CASE WHEN allocated THEN -gpus ELSE 0 END, CASE WHEN allocated THEN 0 ELSE -gpus END
FROM run_slots WHERE stop_reason <> 'open';

-- Each host as a step function: GPUs present, whether it is faulty (faulted or
-- drained, awaiting repair), and GPUs held by allocated / unallocated runs,
-- constant on [start_t, stop_t). Stored per run in derived_host_intervals
-- (plain definition: plain.sql).
CREATE OR REPLACE VIEW host_intervals AS
SELECT run, host, start_t, stop_t, present_gpus, faulty, allocated_gpus, unallocated_gpus
FROM derived_host_intervals;

-- Hourly GPU-hour totals over all hosts (only hours where some host existed).
-- free = healthy and not held; fragmented = free GPUs on healthy hosts that
-- have fewer than host_gpus free, so cannot take a whole-host (8-GPU) job.
-- Stored per run in derived_cluster_hours (plain definition: plain.sql).
CREATE OR REPLACE VIEW cluster_hours AS
SELECT run, hour, total_gpu_h, allocated_gpu_h, unallocated_gpu_h, unavailable_gpu_h, free_gpu_h,
       fragmented_gpu_h
FROM derived_cluster_hours;

-- Capacity per hour: hosts present, and how their GPU-hours were used.
-- total_gpus is the time-weighted mean number of GPUs present in the (clipped)
-- hour. Every hour is listed; `in_warmup` marks those before the warm-up's end
-- (this and the other hourly views are not warm-up aware: they keep the whole
-- run and say which hours the figures leave out).
CREATE OR REPLACE VIEW capacity_by_hour AS
SELECT h.run, h.hour, h.hour_s, h.hour_start < u.measured_from AS in_warmup,
       coalesce(c.total_gpu_h, 0) / (h.hour_s / 3600.0) AS total_gpus,
       coalesce(c.total_gpu_h, 0) AS total_gpu_h,
       coalesce(c.unavailable_gpu_h, 0) AS unavailable_gpu_h,
       coalesce(c.allocated_gpu_h, 0) AS allocated_gpu_h,
       coalesce(c.unallocated_gpu_h, 0) AS unallocated_gpu_h,
       coalesce(c.total_gpu_h - c.allocated_gpu_h - c.unallocated_gpu_h - c.unavailable_gpu_h, 0)
           AS idle_gpu_h
FROM hours AS h
JOIN warmup AS u USING (run)
LEFT JOIN cluster_hours AS c USING (run, hour);

-- Occupancy per hour: busy GPU-hours over the GPU-hours that could be used.
CREATE OR REPLACE VIEW occupancy_by_hour AS
SELECT run, hour, hour_s, in_warmup, total_gpu_h, allocated_gpu_h, unallocated_gpu_h, idle_gpu_h,
       unavailable_gpu_h,
       (allocated_gpu_h + unallocated_gpu_h) / nullif(total_gpu_h - unavailable_gpu_h, 0) AS occupancy
FROM capacity_by_hour;

-- Fragmentation per hour, exact from change points: the share of free GPU-hours
-- on healthy hosts that sat on partly-free hosts. NULL when nothing was free.
-- (The old fragmentation figure; stranded_by_hour is the one the report leads with.)
CREATE OR REPLACE VIEW fragmentation_by_hour AS
SELECT h.run, h.hour, h.hour_s, h.hour_start < u.measured_from AS in_warmup,
       coalesce(c.free_gpu_h, 0) AS free_gpu_h,
       coalesce(c.fragmented_gpu_h, 0) AS fragmented_gpu_h,
       c.fragmented_gpu_h / nullif(c.free_gpu_h, 0) AS fragmentation
FROM hours AS h
JOIN warmup AS u USING (run)
LEFT JOIN cluster_hours AS c USING (run, hour);

-- Stranded GPUs per hour, exact from change points, over capacity. A GPU is
-- stranded while it is free on a healthy host that is only partly free (some
-- of its GPUs are held) AND at least one workload that needs whole hosts
-- (gpus >= hosts x policy.host_gpus) is waiting: submitted, not running, not
-- ended. Such GPUs are capacity that the waiting whole-host work cannot use,
-- in the wrong place rather than missing. stranded_share = stranded GPU-hours
-- / capacity GPU-hours (all GPUs present), so it is GPU-weighted and reads as
-- "this much of the cluster was stranded". Not counted: wholly free hosts
-- (a waiting gang can use them once enough are free), and faulty hosts' free
-- GPUs (unavailable). Whether some small waiting workload could have used the
-- stranded GPUs is not checked: both schedulers start any waiting workload
-- that fits in free GPUs at their next cycle, so such moments are short.
CREATE OR REPLACE VIEW stranded_by_hour AS
WITH partly_free AS (
    SELECT run, start_t, stop_t, present_gpus - allocated_gpus - unallocated_gpus AS free_gpus
    FROM host_intervals
    WHERE NOT faulty AND allocated_gpus + unallocated_gpus > 0
      AND present_gpus - allocated_gpus - unallocated_gpus > 0
),
whole_host AS (
    SELECT w.run, w.workload, w.submitted_at, w.ended_at
    FROM workloads AS w JOIN policy AS p USING (run)
    WHERE w.gpus >= w.hosts * p.host_gpus
),
-- +n/-n changes of two cluster-wide step functions: free GPUs on partly free
-- healthy hosts, and whole-host workloads waiting (in demand minus running).
changes AS (
    SELECT run, start_t AS t, free_gpus AS d_free, 0 AS d_waiting FROM partly_free
    UNION ALL
    SELECT run, stop_t, -free_gpus, 0 FROM partly_free
    UNION ALL
    SELECT run, submitted_at, 0, 1 FROM whole_host
    UNION ALL
    SELECT run, ended_at, 0, -1 FROM whole_host WHERE ended_at IS NOT NULL
    UNION ALL
    SELECT r.run, r.start_at, 0, -1 FROM runs AS r SEMI JOIN whole_host AS w USING (run, workload)
    UNION ALL
    SELECT r.run, r.stop_at, 0, 1 FROM runs AS r SEMI JOIN whole_host AS w USING (run, workload)
    WHERE r.stop_reason <> 'open'
),
levels AS (
    SELECT run, t,
           lead(t) OVER w AS next_t,
           sum(d_free) OVER w AS free_gpus,
           sum(d_waiting) OVER w AS waiting
    FROM (SELECT run, t, sum(d_free) AS d_free, sum(d_waiting) AS d_waiting
          FROM changes GROUP BY run, t)
    WINDOW w AS (PARTITION BY run ORDER BY t ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
),
split AS (
    SELECT run, t, next_t, free_gpus, unnest(range(hour_of(t), next_t, 3600)) AS hour
    FROM levels
    WHERE waiting > 0 AND free_gpus > 0 AND next_t > t
),
per_hour AS (
    SELECT run, hour,
           sum(free_gpus * (least(next_t, hour + 3600) - greatest(t, hour))) / 3600.0 AS stranded_gpu_h
    FROM split
    GROUP BY run, hour
)
SELECT c.run, c.hour, c.hour_s, c.in_warmup,
       c.total_gpu_h AS capacity_gpu_h,
       coalesce(s.stranded_gpu_h, 0) AS stranded_gpu_h,
       coalesce(s.stranded_gpu_h, 0) / nullif(c.total_gpu_h, 0) AS stranded_share
FROM capacity_by_hour AS c
LEFT JOIN per_hour AS s USING (run, hour);

-- Usage per budget node -------------------------------------------------------------------

-- Allocated and unallocated GPU-hours per budget node (every leaf and every
-- ancestor) and hour; zero rows are kept so each node has a full time series.
CREATE OR REPLACE VIEW gpu_hours_by_node_hour AS
WITH deltas AS (
    SELECT run, budget, start_at AS t,
           CASE WHEN allocated THEN gpus ELSE 0 END AS d_alloc,
           CASE WHEN allocated THEN 0 ELSE gpus END AS d_unalloc
    FROM runs
    UNION ALL
    SELECT run, budget, stop_at,
           CASE WHEN allocated THEN -gpus ELSE 0 END, CASE WHEN allocated THEN 0 ELSE -gpus END
    FROM runs WHERE stop_reason <> 'open'
),
-- Hourly integration from the changes, as in team_demand_by_hour.
per_hour AS (
    SELECT d.run, d.budget, hour_of(d.t) AS hour,
           sum(d.d_alloc) AS step_alloc,
           sum(d.d_unalloc) AS step_unalloc,
           sum(d.d_alloc * (least(hour_of(d.t) + 3600, s.end_t) - d.t)) AS tail_alloc,
           sum(d.d_unalloc * (least(hour_of(d.t) + 3600, s.end_t) - d.t)) AS tail_unalloc
    FROM deltas AS d JOIN log_span AS s USING (run)
    GROUP BY d.run, d.budget, hour_of(d.t)
),
leaf_hours AS (
    SELECT h.run, k.budget, h.hour,
           (coalesce(sum(p.step_alloc) OVER before, 0) * h.hour_s + coalesce(p.tail_alloc, 0)) / 3600.0
               AS alloc_h,
           (coalesce(sum(p.step_unalloc) OVER before, 0) * h.hour_s + coalesce(p.tail_unalloc, 0)) / 3600.0
               AS unalloc_h
    FROM (SELECT DISTINCT run, budget FROM per_hour) AS k
    JOIN hours AS h USING (run)
    LEFT JOIN per_hour AS p ON p.run = h.run AND p.budget = k.budget AND p.hour = h.hour
    WINDOW before AS (PARTITION BY h.run, k.budget ORDER BY h.hour
                      ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
),
-- Every leaf's hours count for the leaf and for each of its ancestors.
node_hours AS (
    SELECT run, array_to_string(list_slice(string_split(budget, '/'), 1, depth), '/') AS node, hour,
           sum(alloc_h) AS alloc_h, sum(unalloc_h) AS unalloc_h
    FROM (SELECT *, unnest(range(1, len(string_split(budget, '/')) + 1)) AS depth FROM leaf_hours)
    GROUP BY ALL
)
SELECT h.run, n.node, h.hour,
       coalesce(u.alloc_h, 0) AS allocated_gpu_h,
       coalesce(u.unalloc_h, 0) AS unallocated_gpu_h
FROM (SELECT run, node FROM budget_nodes UNION SELECT run, budget FROM workloads) AS n
JOIN hours AS h USING (run)
LEFT JOIN node_hours AS u ON u.run = h.run AND u.node = n.node AND u.hour = h.hour;

-- Usage against entitlement per budget node and hour: entitled_gpu_h = the node's
-- fraction of the cluster x the GPU-hours present (capacity_by_hour), beside the
-- GPU-hours its work (and its descendants') used, allocated and unallocated.
-- For a date range, sum it, or call usage_against_entitlement(from, until) below.
CREATE OR REPLACE VIEW node_usage_by_hour AS
SELECT u.run, u.node, u.hour, c.hour_s, c.in_warmup,
       coalesce(e.fraction, 0) AS fraction,
       c.total_gpus,
       coalesce(e.fraction, 0) * c.total_gpu_h AS entitled_gpu_h,
       u.allocated_gpu_h, u.unallocated_gpu_h,
       u.allocated_gpu_h + u.unallocated_gpu_h AS used_gpu_h
FROM gpu_hours_by_node_hour AS u
JOIN capacity_by_hour AS c ON c.run = u.run AND c.hour = u.hour
LEFT JOIN entitlement_by_hour AS e ON e.run = u.run AND e.node = u.node AND e.hour = u.hour;

-- "Usage against entitlement per node for a date range": the hours starting in
-- [from_t, until_t) (Unix seconds; epoch(TIMESTAMP '2026-12-01') gives one),
-- summed per run and node. ratio = allocated / entitled (NULL if nothing was
-- entitled); above 1 the node used more than its share (borrowed idle GPUs).
CREATE OR REPLACE MACRO usage_against_entitlement(from_t, until_t) AS TABLE
SELECT run, node, count(*) AS hours,
       sum(entitled_gpu_h) AS entitled_gpu_h,
       sum(allocated_gpu_h) AS allocated_gpu_h,
       sum(unallocated_gpu_h) AS unallocated_gpu_h,
       sum(allocated_gpu_h) / nullif(sum(entitled_gpu_h), 0) AS ratio
FROM node_usage_by_hour
WHERE hour >= from_t AND hour < until_t
GROUP BY run, node
ORDER BY run, node;

-- Owed vs received ---------------------------------------------------------------------

-- Per team and hour, GPU-hours of FUNDED workloads (min_runtime_s > 0,
-- whatever the policy): demand = pending or running (submission to end; a
-- requeue keeps it in demand), received = running; and the same over ALL of
-- the team's workloads, funded or not (demand_all_gpu_h, received_all_gpu_h).
--
-- Integrated by hour from the changes alone, without ordering them: within an
-- hour [hs, he), the level is the level at hs (the sum of all earlier changes)
-- and a change d at t adds d x (he - t) GPU-seconds. Only the per-team hourly
-- sums need a running total, not the changes themselves. Stored per run in
-- derived_team_demand_by_hour (plain definition: plain.sql).
CREATE OR REPLACE VIEW team_demand_by_hour AS
SELECT run, team, hour, demand_gpu_h, received_gpu_h, demand_all_gpu_h, received_all_gpu_h
FROM derived_team_demand_by_hour;

-- The lab's definition, hour by hour: entitled = team fraction x GPUs present;
-- owed = least(entitled, demand); received_capped = least(received, owed).
-- The same over all of the team's work, funded or not: owed_all_gpu_h =
-- least(entitled, demand_all), received_all_capped = least(received_all,
-- owed_all). Every hour is listed; in_warmup marks the ones the totals leave out.
CREATE OR REPLACE VIEW owed_received AS
WITH base AS (
    SELECT tm.run, tm.team, h.hour, h.hour_s, c.in_warmup,
           coalesce(e.fraction, 0) AS fraction,
           c.total_gpus,
           coalesce(e.fraction, 0) * c.total_gpu_h AS entitled_gpu_h,
           coalesce(d.demand_gpu_h, 0) AS demand_gpu_h,
           coalesce(d.received_gpu_h, 0) AS received_gpu_h,
           coalesce(d.demand_all_gpu_h, 0) AS demand_all_gpu_h,
           coalesce(d.received_all_gpu_h, 0) AS received_all_gpu_h
    FROM teams AS tm
    JOIN hours AS h USING (run)
    JOIN capacity_by_hour AS c ON c.run = h.run AND c.hour = h.hour
    LEFT JOIN entitlement_by_hour AS e ON e.run = h.run AND e.node = tm.team AND e.hour = h.hour
    LEFT JOIN team_demand_by_hour AS d ON d.run = h.run AND d.team = tm.team AND d.hour = h.hour
)
SELECT run, team, hour, hour_s, in_warmup, fraction, total_gpus, entitled_gpu_h, demand_gpu_h,
       least(entitled_gpu_h, demand_gpu_h) AS owed_gpu_h,
       received_gpu_h,
       least(received_gpu_h, least(entitled_gpu_h, demand_gpu_h)) AS received_capped,
       demand_all_gpu_h,
       least(entitled_gpu_h, demand_all_gpu_h) AS owed_all_gpu_h,
       received_all_gpu_h,
       least(received_all_gpu_h, least(entitled_gpu_h, demand_all_gpu_h)) AS received_all_capped
FROM base;

-- Per team over the hours after the warm-up (warm-up aware): ratio =
-- received_capped / owed (NULL if nothing was owed), over funded work; ratio_all
-- the same over all of the team's work.
CREATE OR REPLACE VIEW owed_received_by_team AS
SELECT run, team,
       sum(entitled_gpu_h) AS entitled_gpu_h,
       sum(demand_gpu_h) AS demand_gpu_h,
       sum(owed_gpu_h) AS owed_gpu_h,
       sum(received_gpu_h) AS received_gpu_h,
       sum(received_capped) AS received_capped,
       sum(received_capped) / nullif(sum(owed_gpu_h), 0) AS ratio,
       sum(demand_all_gpu_h) AS demand_all_gpu_h,
       sum(owed_all_gpu_h) AS owed_all_gpu_h,
       sum(received_all_gpu_h) AS received_all_gpu_h,
       sum(received_all_capped) AS received_all_capped,
       sum(received_all_capped) / nullif(sum(owed_all_gpu_h), 0) AS ratio_all
FROM owed_received
WHERE NOT in_warmup
GROUP BY run, team;

-- Received net of idle holds and of killed work ----------------------------------------

-- Run time that delivered nothing, as intervals [from_t, until_t) of a run's
-- GPUs, by what it was:
--   * 'idle_hold': the whole run of a squatter's hold (a workload of kind
--     'squat': the simulator's squatters, see docs/scenarios.md). The hold is
--     charged and counted as received, but it runs no work (the owner's debug
--     runs inside it are not on the log);
--   * 'lost_run': a run preempted without requeue: all of it is lost;
--   * 'since_checkpoint': a requeued victim keeps its work up to its last
--     checkpoint (every checkpoint_interval_s of run time from the run's
--     start; continuously when unset), so it loses the last duration_s %
--     checkpoint_interval_s seconds of the run (the executor's model,
--     simulator/driver.py);
--   * 'restart': the first restart_overhead_s seconds of the run after a
--     requeued preemption, spent reloading (capped at the run's length).
-- A run's 'restart' head and its lost tail never overlap (the tail is cut
-- where the head ends), so together they never exceed the run. Complete (not
-- warm-up aware): the hourly view below says which hours count. This is GPU
-- time received that did no work; it differs from the executor's lost count
-- (sim.lost_gpu_h) in where the restart overhead falls (in the next run,
-- where it is spent, and not at all when the victim never restarted).
CREATE OR REPLACE VIEW unproductive_runs AS
WITH spec AS (
    SELECT run, id AS submit_event,
           arg_min(checkpoint_interval_s, seq) AS checkpoint_interval_s,
           arg_min(restart_overhead_s, seq) AS restart_overhead_s
    FROM events WHERE type = 'workload.submitted'
    GROUP BY run, id
),
r AS (
    SELECT r.run, r.workload, r.team, r.kind, r.gpus, r.funded, r.start_at, r.stop_at,
           r.duration_s, r.stop_reason, r.requeued,
           coalesce(lag(r.stop_reason = 'preempted' AND coalesce(r.requeued, false))
                        OVER (PARTITION BY r.run, r.workload ORDER BY r.start_seq), false) AS resumed,
           coalesce(s.checkpoint_interval_s, 0) AS checkpoint_s,
           coalesce(s.restart_overhead_s, 0) AS restart_s
    FROM runs AS r
    JOIN workloads AS w USING (run, workload)
    LEFT JOIN spec AS s ON s.run = w.run AND s.submit_event = w.submit_event
),
parts AS (
    SELECT *,
           CASE WHEN resumed THEN least(restart_s, duration_s) ELSE 0 END AS head_s,
           CASE WHEN stop_reason <> 'preempted' THEN 0
                WHEN NOT coalesce(requeued, false) THEN duration_s
                WHEN checkpoint_s > 0 THEN duration_s % checkpoint_s
                ELSE 0 END AS tail_s
    FROM r WHERE kind IS DISTINCT FROM 'squat'
)
SELECT run, workload, team, kind, gpus, funded, 'idle_hold' AS what, start_at AS from_t,
       stop_at AS until_t
FROM r WHERE kind = 'squat' AND stop_at > start_at
UNION ALL
SELECT run, workload, team, kind, gpus, funded, 'restart', start_at, start_at + head_s
FROM parts WHERE head_s > 0
UNION ALL
SELECT run, workload, team, kind, gpus, funded,
       CASE WHEN coalesce(requeued, false) THEN 'since_checkpoint' ELSE 'lost_run' END,
       stop_at - least(tail_s, duration_s - head_s), stop_at
FROM parts WHERE least(tail_s, duration_s - head_s) > 0;

-- Per team and hour: GPU-hours of FUNDED work (as received_gpu_h in
-- owed_received) that were idle holds (hold_gpu_h) and killed work
-- (killed_gpu_h: lost_run + since_checkpoint + restart), and the holds'
-- demand (hold_demand_gpu_h: from a hold's submission to its end, as
-- demand_gpu_h counts it). Only hours with some are listed. Complete, not
-- warm-up aware. Stored per run in derived_unproductive_by_hour (plain
-- definition, from unproductive_runs: plain.sql).
CREATE OR REPLACE VIEW unproductive_by_hour AS
SELECT run, team, hour, hold_gpu_h, killed_gpu_h, hold_demand_gpu_h
FROM derived_unproductive_by_hour;

-- owed_received with received net of what did no work, per team and hour.
-- An idle hold is neither useful demand nor useful receipt: net of idle
-- holds, the books are kept as if the holds did not exist: owed_net_gpu_h =
-- least(entitled, demand - the holds' demand), received_net_idle_capped =
-- least(received - holds, owed_net). Killed work was wanted (it stays in
-- demand) but what it received was wasted: received_net_killed_capped =
-- least(received - killed, owed) against the lab's owed, unchanged.
-- received_net_capped = least(received - holds - killed, owed_net): both.
-- (A team's waste first comes out of what it received above what it was
-- owed, as received_capped caps receipts at owed.) Every hour is listed;
-- in_warmup marks the ones the totals leave out.
CREATE OR REPLACE VIEW owed_received_net AS
WITH b AS (
    SELECT o.*, coalesce(u.hold_gpu_h, 0) AS hold_gpu_h, coalesce(u.killed_gpu_h, 0) AS killed_gpu_h,
           coalesce(u.hold_demand_gpu_h, 0) AS hold_demand_gpu_h,
           least(o.entitled_gpu_h, greatest(o.demand_gpu_h - coalesce(u.hold_demand_gpu_h, 0), 0))
               AS owed_net_gpu_h
    FROM owed_received AS o
    LEFT JOIN unproductive_by_hour AS u USING (run, team, hour)
)
SELECT run, team, hour, in_warmup, owed_gpu_h, received_gpu_h, received_capped, hold_gpu_h,
       killed_gpu_h, hold_demand_gpu_h, owed_net_gpu_h,
       least(greatest(received_gpu_h - hold_gpu_h, 0), owed_net_gpu_h) AS received_net_idle_capped,
       least(greatest(received_gpu_h - killed_gpu_h, 0), owed_gpu_h) AS received_net_killed_capped,
       least(greatest(received_gpu_h - hold_gpu_h - killed_gpu_h, 0), owed_net_gpu_h)
           AS received_net_capped
FROM b;

-- Per team over the hours after the warm-up (warm-up aware): the gross ratio
-- (as owed_received_by_team) beside the net ones: ratio_net_idle and
-- ratio_net over owed_net_gpu_h, ratio_net_killed over owed_gpu_h.
CREATE OR REPLACE VIEW owed_received_net_by_team AS
SELECT run, team,
       sum(owed_gpu_h) AS owed_gpu_h,
       sum(owed_net_gpu_h) AS owed_net_gpu_h,
       sum(received_gpu_h) AS received_gpu_h,
       sum(hold_gpu_h) AS hold_gpu_h,
       sum(hold_demand_gpu_h) AS hold_demand_gpu_h,
       sum(killed_gpu_h) AS killed_gpu_h,
       sum(received_capped) AS received_capped,
       sum(received_net_idle_capped) AS received_net_idle_capped,
       sum(received_net_killed_capped) AS received_net_killed_capped,
       sum(received_net_capped) AS received_net_capped,
       sum(received_capped) / nullif(sum(owed_gpu_h), 0) AS ratio,
       sum(received_net_idle_capped) / nullif(sum(owed_net_gpu_h), 0) AS ratio_net_idle,
       sum(received_net_killed_capped) / nullif(sum(owed_gpu_h), 0) AS ratio_net_killed,
       sum(received_net_capped) / nullif(sum(owed_net_gpu_h), 0) AS ratio_net
FROM owed_received_net
WHERE NOT in_warmup
GROUP BY run, team;

-- Waits of requeued runs ------------------------------------------------------------------

-- One row per run preempted with requeue: the wait from the preemption to the
-- workload's next start (NULL restarted_at when it never restarted: wait_s is
-- then the censored end of log - preemption, and `censored` says so; a
-- workload cancelled while requeued is censored too). `in_warmup`: preempted
-- before the warm-up ended. The rows (but in_warmup) are stored per run in
-- derived_requeue_waits, which keeps the workload's key; its name, kind,
-- team, ... come from derived_workloads (plain definition: plain.sql).
CREATE OR REPLACE VIEW requeue_waits AS
SELECT q.run, w.workload, w.kind, w.gpus, w.funded, w.team, q.preempted_at, q.restarted_at,
       q.wait_s, q.censored, q.preempted_at < u.measured_from AS in_warmup
FROM derived_requeue_waits AS q
JOIN derived_workloads AS w USING (run, wkey)
JOIN warmup AS u USING (run);

-- Requeue-wait percentiles per kind and over all kinds ('all'), over the
-- preemptions after the warm-up (warm-up aware), censored waits counted as in
-- wait_percentiles (a `*_censored` flag says a figure is only a lower bound).
CREATE OR REPLACE VIEW requeue_wait_percentiles AS
SELECT run,
       CASE WHEN grouping(kind) = 1 THEN 'all' ELSE kind END AS kind,
       count(*) AS n,
       count(*) FILTER (WHERE NOT censored) AS restarted,
       count(*) FILTER (WHERE censored) AS never_restarted,
       quantile_cont(wait_s, 0.5) AS p50,
       quantile_cont(wait_s, 0.9) AS p90,
       quantile_cont(wait_s, 0.99) AS p99,
       avg(wait_s) AS mean,
       max(wait_s) AS max,
       quantile_cont(wait_s, 0.5) IS DISTINCT FROM quantile_cont(capped, 0.5) AS p50_censored,
       quantile_cont(wait_s, 0.9) IS DISTINCT FROM quantile_cont(capped, 0.9) AS p90_censored,
       quantile_cont(wait_s, 0.99) IS DISTINCT FROM quantile_cont(capped, 0.99) AS p99_censored
FROM (SELECT *, CASE WHEN censored THEN 1e18 ELSE wait_s END AS capped
      FROM requeue_waits WHERE NOT in_warmup)
GROUP BY GROUPING SETS ((run, kind), (run));

-- Refused work ------------------------------------------------------------------------------

-- Per run and reason: workload submissions the scheduler refused
-- (workload.rejected), which appear in no other figure. demand_gpu_h = GPUs x
-- the submission's expected_duration_s, over those that gave one
-- (with_duration says how many). `refused` and `demand_gpu_h` count the
-- refusals after the warm-up (warm-up aware); `refused_all` and
-- `demand_all_gpu_h` the whole log.
CREATE OR REPLACE VIEW refusals AS
WITH rejected AS (
    SELECT r.run, r.t, r.reason, s.gpus, s.expected_duration_s
    FROM events AS r
    JOIN (SELECT run, id, arg_min(gpus, seq) AS gpus,
                 arg_min(expected_duration_s, seq) AS expected_duration_s
          FROM events WHERE type = 'workload.submitted' GROUP BY run, id) AS s
        ON s.run = r.run AND s.id = r.cause
    WHERE r.type = 'workload.rejected'
)
SELECT r.run, r.reason,
       count(*) FILTER (WHERE r.t >= u.measured_from) AS refused,
       coalesce(sum(r.gpus * r.expected_duration_s) FILTER (WHERE r.t >= u.measured_from), 0) / 3600.0
           AS demand_gpu_h,
       count(r.expected_duration_s) FILTER (WHERE r.t >= u.measured_from) AS with_duration,
       count(*) AS refused_all,
       coalesce(sum(r.gpus * r.expected_duration_s), 0) / 3600.0 AS demand_all_gpu_h
FROM rejected AS r JOIN warmup AS u USING (run)
GROUP BY r.run, r.reason;
