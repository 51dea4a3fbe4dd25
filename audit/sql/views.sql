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
-- Performance notes (10M events): the two sorts that matter are the per-workload
-- lifecycle and the per-host timeline; report.summary() snapshots the views it
-- reads so each is computed once.
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

-- Workloads ------------------------------------------------------------------------------

-- Accepted lifecycle events of workloads (everything after the submission).
CREATE OR REPLACE VIEW workload_events AS
SELECT run, seq, t, id, cause, type, workload, placement, allocated, protected_until,
       reason, "by", requeued, outcome
FROM accepted_events
WHERE type IN ('workload.started', 'workload.preempted', 'workload.finished', 'workload.cancelled');

-- Each lifecycle event with the same workload's next one (NULLs when it is the
-- last). Runs, waits and workloads all read this one sort. It stays narrow on
-- purpose (a sort carries every column along), and runs fetches the details of
-- both ends by seq.
CREATE OR REPLACE VIEW lifecycle AS
SELECT run, workload, seq, t, type,
       lead(seq) OVER w AS next_seq,
       lead(t) OVER w AS next_t,
       lead(type) OVER w AS next_type
FROM workload_events
WINDOW w AS (PARTITION BY run, workload ORDER BY seq);

-- One row per accepted submission. A repeated identical submission (ignored by
-- the scheduler, so not rejected) does not count: the first one wins.
CREATE OR REPLACE VIEW workloads AS
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
CREATE OR REPLACE VIEW runs AS
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
CREATE OR REPLACE VIEW waits AS
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
       coalesce(r.requeue_waits, []::BIGINT[]) AS requeue_waits
FROM workloads AS w
LEFT JOIN requeues AS r USING (run, workload);

-- First-wait percentiles per kind and over all kinds ('all'); workloads that
-- never started are counted (never_started) but have no wait to rank. (Read
-- from `workloads`, which carries the same first_wait_s, so the percentiles do
-- not pay for the requeue lists.)
CREATE OR REPLACE VIEW wait_percentiles AS
SELECT run,
       CASE WHEN grouping(kind) = 1 THEN 'all' ELSE kind END AS kind,
       count(*) AS n,
       count(first_wait_s) AS started,
       count(*) - count(first_wait_s) AS never_started,
       quantile_cont(first_wait_s, 0.5) AS p50,
       quantile_cont(first_wait_s, 0.9) AS p90,
       quantile_cont(first_wait_s, 0.99) AS p99,
       avg(first_wait_s) AS mean,
       max(first_wait_s) AS max
FROM workloads
GROUP BY GROUPING SETS ((run, kind), (run));

-- Preemptions --------------------------------------------------------------------------

-- Per reason: how many runs were preempted, how many went back to the queue,
-- and the GPU-hours of work lost (whole run x GPUs for victims that were not
-- requeued; a requeued victim resumes, so it loses nothing here).
CREATE OR REPLACE VIEW preemptions AS
SELECT run, preempt_reason AS reason,
       count(*) AS count,
       count(*) FILTER (WHERE requeued) AS requeued,
       coalesce(sum(CASE WHEN requeued THEN 0 ELSE gpus * duration_s END), 0) / 3600.0 AS gpu_hours_lost
FROM runs
WHERE stop_reason = 'preempted'
GROUP BY run, preempt_reason;

-- Hosts ---------------------------------------------------------------------------------

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
-- constant on [start_t, stop_t).
--
-- The running totals go over one order per run, (host, t), rather than one
-- partition per host, which DuckDB computes about twice as slowly. Each host
-- gets a last change at the end of the log that brings its totals back to zero,
-- so the next host starts from zero too. Changes at the same instant are not
-- merged first: the interim levels between them last zero seconds, and those
-- empty intervals are dropped.
CREATE OR REPLACE VIEW host_intervals AS
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
CREATE OR REPLACE VIEW cluster_hours AS
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

-- Capacity per hour: hosts present, and how their GPU-hours were used.
-- total_gpus is the time-weighted mean number of GPUs present in the (clipped) hour.
CREATE OR REPLACE VIEW capacity_by_hour AS
SELECT h.run, h.hour, h.hour_s,
       coalesce(c.total_gpu_h, 0) / (h.hour_s / 3600.0) AS total_gpus,
       coalesce(c.total_gpu_h, 0) AS total_gpu_h,
       coalesce(c.unavailable_gpu_h, 0) AS unavailable_gpu_h,
       coalesce(c.allocated_gpu_h, 0) AS allocated_gpu_h,
       coalesce(c.unallocated_gpu_h, 0) AS unallocated_gpu_h,
       coalesce(c.total_gpu_h - c.allocated_gpu_h - c.unallocated_gpu_h - c.unavailable_gpu_h, 0)
           AS idle_gpu_h
FROM hours AS h
LEFT JOIN cluster_hours AS c USING (run, hour);

-- Occupancy per hour: busy GPU-hours over the GPU-hours that could be used.
CREATE OR REPLACE VIEW occupancy_by_hour AS
SELECT run, hour, hour_s, total_gpu_h, allocated_gpu_h, unallocated_gpu_h, idle_gpu_h,
       unavailable_gpu_h,
       (allocated_gpu_h + unallocated_gpu_h) / nullif(total_gpu_h - unavailable_gpu_h, 0) AS occupancy
FROM capacity_by_hour;

-- Fragmentation per hour, exact from change points: the share of free GPU-hours
-- on healthy hosts that sat on partly-free hosts. NULL when nothing was free.
CREATE OR REPLACE VIEW fragmentation_by_hour AS
SELECT h.run, h.hour, h.hour_s,
       coalesce(c.free_gpu_h, 0) AS free_gpu_h,
       coalesce(c.fragmented_gpu_h, 0) AS fragmented_gpu_h,
       c.fragmented_gpu_h / nullif(c.free_gpu_h, 0) AS fragmentation
FROM hours AS h
LEFT JOIN cluster_hours AS c USING (run, hour);

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

-- Owed vs received ---------------------------------------------------------------------

-- Per team and hour, GPU-hours of FUNDED workloads (min_runtime_s > 0,
-- whatever the policy): demand = pending or running (submission to end; a
-- requeue keeps it in demand), received = running.
--
-- Integrated by hour from the changes alone, without ordering them: within an
-- hour [hs, he), the level is the level at hs (the sum of all earlier changes)
-- and a change d at t adds d x (he - t) GPU-seconds. Only the per-team hourly
-- sums need a running total, not the changes themselves.
CREATE OR REPLACE VIEW team_demand_by_hour AS
WITH deltas AS (
    SELECT run, team, submitted_at AS t, gpus AS d_demand, 0 AS d_received
    FROM workloads WHERE funded
    UNION ALL
    SELECT run, team, ended_at, -gpus, 0 FROM workloads WHERE funded AND ended_at IS NOT NULL
    UNION ALL
    SELECT run, team, start_at, 0, gpus FROM runs WHERE funded
    UNION ALL
    SELECT run, team, stop_at, 0, -gpus FROM runs WHERE funded AND stop_reason <> 'open'
),
per_hour AS (
    SELECT d.run, d.team, hour_of(d.t) AS hour,
           sum(d.d_demand) AS step_demand,
           sum(d.d_received) AS step_received,
           sum(d.d_demand * (least(hour_of(d.t) + 3600, s.end_t) - d.t)) AS tail_demand,
           sum(d.d_received * (least(hour_of(d.t) + 3600, s.end_t) - d.t)) AS tail_received
    FROM deltas AS d JOIN log_span AS s USING (run)
    GROUP BY d.run, d.team, hour_of(d.t)
),
grid AS (
    SELECT h.run, k.team, h.hour, h.hour_s, p.step_demand, p.step_received,
           p.tail_demand, p.tail_received
    FROM (SELECT DISTINCT run, team FROM per_hour) AS k
    JOIN hours AS h USING (run)
    LEFT JOIN per_hour AS p ON p.run = h.run AND p.team = k.team AND p.hour = h.hour
)
SELECT run, team, hour,
       (coalesce(sum(step_demand) OVER before, 0) * hour_s + coalesce(tail_demand, 0)) / 3600.0
           AS demand_gpu_h,
       (coalesce(sum(step_received) OVER before, 0) * hour_s + coalesce(tail_received, 0)) / 3600.0
           AS received_gpu_h
FROM grid
WINDOW before AS (PARTITION BY run, team ORDER BY hour ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING);

-- The lab's definition, hour by hour: entitled = team fraction x GPUs present;
-- owed = least(entitled, demand); received_capped = least(received, owed).
CREATE OR REPLACE VIEW owed_received AS
WITH base AS (
    SELECT tm.run, tm.team, h.hour, h.hour_s,
           coalesce(e.fraction, 0) AS fraction,
           c.total_gpus,
           coalesce(e.fraction, 0) * c.total_gpu_h AS entitled_gpu_h,
           coalesce(d.demand_gpu_h, 0) AS demand_gpu_h,
           coalesce(d.received_gpu_h, 0) AS received_gpu_h
    FROM teams AS tm
    JOIN hours AS h USING (run)
    JOIN capacity_by_hour AS c ON c.run = h.run AND c.hour = h.hour
    LEFT JOIN entitlement_by_hour AS e ON e.run = h.run AND e.node = tm.team AND e.hour = h.hour
    LEFT JOIN team_demand_by_hour AS d ON d.run = h.run AND d.team = tm.team AND d.hour = h.hour
)
SELECT run, team, hour, hour_s, fraction, total_gpus, entitled_gpu_h, demand_gpu_h,
       least(entitled_gpu_h, demand_gpu_h) AS owed_gpu_h,
       received_gpu_h,
       least(received_gpu_h, least(entitled_gpu_h, demand_gpu_h)) AS received_capped
FROM base;

-- Per team over the whole run: ratio = received_capped / owed (NULL if nothing was owed).
CREATE OR REPLACE VIEW owed_received_by_team AS
SELECT run, team,
       sum(entitled_gpu_h) AS entitled_gpu_h,
       sum(demand_gpu_h) AS demand_gpu_h,
       sum(owed_gpu_h) AS owed_gpu_h,
       sum(received_gpu_h) AS received_gpu_h,
       sum(received_capped) AS received_capped,
       sum(received_capped) / nullif(sum(owed_gpu_h), 0) AS ratio
FROM owed_received
GROUP BY run, team;
