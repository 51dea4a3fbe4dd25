"""A real executor: ``allot executor local`` runs the commands the scheduler starts on one host.

One per machine, like Slurm's slurmd. It reads its cluster's journal
(``streams.journal_tail``), and for every ``workload.started`` that places
work on its host it runs the workload's command (``workload.submitted``'s run
spec) with ``CUDA_VISIBLE_DEVICES`` set to exactly the GPUs it was given; it
stops runs the journal ends (preemption with the policy's grace, cancellation,
a gang peer's finish), enforces each run's wall-clock limit, and reports
``workload.finished`` / ``workload.stopped`` with ids derived from the
workload and run, so a repeat is dropped. Its state is a directory of run
directories (``executor.supervisor``): a restart finds what it launched,
reports what ended meanwhile, and never starts a run twice. A workload may
declare a checkpoint and a restore hook: on a preemption the checkpoint hook
runs first, within the grace, and the requeued run restores what it saved.

Modules: ``spec`` (what a run is and the environment it gets), ``book`` (the
pure fold of the journal: what this host should be running), ``launch`` (the
small parent process of each command, which records its exit), ``hooks`` (a
session's checkpoint and restore hooks, and the process that runs a
checkpoint hook), ``supervisor``
(process groups, signals, the state directory), ``local`` (the loop over
Kafka that reconciles the two and reports), ``cli`` (the command).
"""
