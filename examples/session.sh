#!/bin/sh
# A stand-in for an interactive session (a notebook kernel, a debugger) whose
# state lives only in memory: it "runs a cell" every second and counts them.
# Asked to save (SIGUSR1, sent by its checkpoint hook, examples/session-hook.sh)
# it writes its state to $ALLOT_CHECKPOINT_DIR; started again after a
# preemption it picks up what its restore hook put back in ./session-state.txt.
cells=0
if [ "${ALLOT_RESTORE_STATUS:-}" = ok ] && [ -s session-state.txt ]; then
    cells=$(cat session-state.txt)
fi
echo "session: run ${ALLOT_RUN:-?} of ${ALLOT_WORKLOAD:-?}, ${cells} cells in memory" \
     "(restored from: ${ALLOT_RESTORE_FROM:-nothing})"
# Write then rename, so a hook cut short never leaves half a state behind.
save() {
    echo "$cells" > "$ALLOT_CHECKPOINT_DIR/state.tmp" && \
        mv "$ALLOT_CHECKPOINT_DIR/state.tmp" "$ALLOT_CHECKPOINT_DIR/state"
    echo "session: state saved at ${cells} cells"
}
trap save USR1
trap 'echo "session: SIGTERM at ${cells} cells"; exit 0' TERM
while :; do
    sleep 1 & wait $!   # a builtin wait: the traps run at once, not after the sleep
    cells=$((cells + 1))
done
