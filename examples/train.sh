#!/bin/sh
# A stand-in for a training job that checkpoints, for trying allot without GPUs:
# it counts STEPS steps (default 20) of one second each, saves its step to
# CHECKPOINT (default ./checkpoint.txt) when it gets SIGTERM (a preemption, with
# the policy's grace) and resumes from there on its next run.
steps=${STEPS:-20}
ckpt=${CHECKPOINT:-checkpoint.txt}
n=$(cat "$ckpt" 2>/dev/null || echo 0)
echo "run ${ALLOT_RUN:-?} of ${ALLOT_WORKLOAD:-?} on GPUs ${CUDA_VISIBLE_DEVICES:-none}: from step $n of $steps"
# Write then rename, so a run killed mid-write never leaves half a checkpoint.
trap 'echo "$n" > "$ckpt.tmp" && mv "$ckpt.tmp" "$ckpt"; echo "SIGTERM: checkpoint saved at step $n"; exit 0' TERM
while [ "$n" -lt "$steps" ]; do
    sleep 1 & wait $!   # a builtin wait: the trap runs at once, not after the sleep
    n=$((n + 1))
done
rm -f "$ckpt"
echo "done: $steps steps"
