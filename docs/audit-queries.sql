-- Example audit queries. Open the database with the duckdb CLI
--   duckdb allot.duckdb
-- or through allot:
--   allot audit sql "$(cat query.sql)"
-- Every query runs on any loaded database (a test checks that); add
-- `WHERE run = '...'` to look at one run when several are loaded.
-- The warm-up aware views leave out each run's first lookback window; to keep
-- everything, first run:  SET VARIABLE allot_warmup_s = 0;

-- 1. Why was a workload preempted? Every run that ended in a preemption: which
--    rule, which workload (or host) took the GPUs, and whether it went back to
--    the queue. The most recent first.
SELECT run, workload, team, kind, gpus, start_at, stop_at, duration_s,
       allocated, protected_until, preempt_reason, preempted_by, requeued
FROM runs
WHERE stop_reason = 'preempted'
ORDER BY stop_at DESC, workload
LIMIT 20;

-- 2. GPU-hours by team per day, allocated (charged to the team) and unallocated
--    (free cycles the team borrowed).
SELECT g.run, g.node AS team, date_trunc('day', to_timestamp(g.hour)) AS day,
       round(sum(g.allocated_gpu_h), 1) AS allocated_gpu_h,
       round(sum(g.unallocated_gpu_h), 1) AS unallocated_gpu_h
FROM gpu_hours_by_node_hour AS g
JOIN teams AS t ON t.run = g.run AND t.team = g.node
GROUP BY ALL
ORDER BY g.run, day, team;

-- 3. The worst first waits: who waited longest before their first start, and
--    what they asked for. Workloads still waiting at the end of the log come first.
SELECT run, workload, team, kind, gpus, hosts, submitted_at,
       wait_s AS waited_s,     -- for one still waiting: at least this long (censored)
       censored AS still_waiting
FROM waits
ORDER BY still_waiting DESC, waited_s DESC
LIMIT 20;

-- 4. Did every team get what it was owed? Worst first. ratio = received (capped
--    at owed) / owed, where owed = entitlement capped hour by hour at demand.
SELECT run, team, round(owed_gpu_h, 1) AS owed_gpu_h, round(received_capped, 1) AS received_gpu_h,
       round(received_gpu_h - received_capped, 1) AS beyond_owed_gpu_h,
       round(100 * ratio, 1) AS pct_of_owed
FROM owed_received_by_team
ORDER BY ratio NULLS LAST, team;

-- 5. Usage against entitlement, hour by hour, for one team (the plot researchers
--    asked for): what it was entitled to, what it wanted, what it got.
SELECT o.run, o.team, to_timestamp(o.hour) AS hour, round(o.entitled_gpu_h, 2) AS entitled,
       round(o.demand_gpu_h, 2) AS demand, round(o.received_gpu_h, 2) AS received
FROM owed_received AS o
WHERE o.team = (SELECT min(team) FROM teams)
ORDER BY o.run, o.hour;

-- 6. Host faults: how long each host took to drain, and to come back.
SELECT run, host, severity, reason, to_timestamp(faulted_at) AS faulted, drain_s,
       repaired_at - coalesce(drained_at, faulted_at) AS repair_s, faults
FROM host_faults
ORDER BY drain_s DESC NULLS FIRST;

-- 7. The hours the cluster was least busy, and how fragmented its free GPUs were then.
SELECT o.run, to_timestamp(o.hour) AS hour, round(o.occupancy, 3) AS occupancy,
       round(o.unavailable_gpu_h, 1) AS unavailable_gpu_h,
       round(f.fragmentation, 3) AS fragmentation
FROM occupancy_by_hour AS o
JOIN fragmentation_by_hour AS f USING (run, hour)
ORDER BY o.occupancy NULLS LAST
LIMIT 10;

-- 8. The budget's audit trail: every edit, who made it, and whether it was refused.
SELECT e.run, e.seq, to_timestamp(e.t) AS time, e.actor, e.type,
       coalesce(e.path, e.parent) AS node, e.shares, e.child_shares,
       r.reason AS refused_because
FROM events AS e
LEFT JOIN events AS r ON r.run = e.run AND r.cause = e.id AND r.type = 'budget.edit_rejected'
WHERE e.type IN ('budget.node_defined', 'budget.shares_set')
ORDER BY e.run, e.seq;

-- 9. Two runs of the same scenario side by side (e.g. allot vs baseline): wait
--    percentiles per kind.
SELECT kind,
       max(p50) FILTER (WHERE p.scheduler = 'allot') AS allot_p50_s,
       max(p50) FILTER (WHERE p.scheduler = 'baseline') AS baseline_p50_s,
       max(p90) FILTER (WHERE p.scheduler = 'allot') AS allot_p90_s,
       max(p90) FILTER (WHERE p.scheduler = 'baseline') AS baseline_p90_s
FROM wait_percentiles AS w
JOIN policy AS p USING (run)
GROUP BY kind
ORDER BY kind = 'all', kind;

-- 10. Which workloads lost the most work to preemption (GPU-hours of runs that
--     ended preempted without being requeued)?
SELECT run, workload, team, kind,
       round(sum(gpus * duration_s) / 3600.0, 2) AS lost_gpu_h, count(*) AS preemptions
FROM runs
WHERE stop_reason = 'preempted' AND NOT requeued
GROUP BY ALL
ORDER BY lost_gpu_h DESC
LIMIT 20;

-- Who starved? Per kind, how many never started, and the waits with them
-- counted (censored: a lower bound) next to the waits of the ones that started.
SELECT run, kind, n, never_started,
       round(p90) AS p90_s, p90_censored, round(p90_started) AS p90_started_s
FROM wait_percentiles
ORDER BY run, kind = 'all', kind;

-- The largest gangs: how many of them ever started, and the longest wait
-- (a gang that never started counts with its wait so far).
SELECT run, gpus, workloads, started, max_wait_s, max_wait_censored, max_wait_started_s
FROM largest_gang_waits;

-- Stranded capacity per day: free GPUs on partly free hosts while a whole-host
-- workload waits, as a share of all GPU-hours.
SELECT run, date_trunc('day', to_timestamp(hour)) AS day,
       round(sum(stranded_gpu_h) / nullif(sum(capacity_gpu_h), 0), 4) AS stranded_share
FROM stranded_by_hour
WHERE NOT in_warmup
GROUP BY ALL
ORDER BY run, day;

-- Owed vs received over funded work and over all work, per team.
SELECT run, team, round(ratio, 3) AS funded_ratio, round(ratio_all, 3) AS all_work_ratio
FROM owed_received_by_team
ORDER BY run, team;

-- What a load left out: lines skipped with --skip-bad, and a log's cut last line.
SELECT l.run, l.source, l.events, l.lines, s.line, s.reason
FROM loaded_runs AS l LEFT JOIN skipped_lines AS s USING (run)
ORDER BY l.run, s.line;

-- Usage against entitlement per budget node for a date range (here: the whole log).
SELECT run, node, hours, round(entitled_gpu_h, 1) AS entitled_gpu_h,
       round(allocated_gpu_h, 1) AS allocated_gpu_h, round(ratio, 3) AS ratio
FROM usage_against_entitlement(0, epoch(TIMESTAMP '2100-01-01'))
ORDER BY run, node;
