#!/bin/sh
# The hooks of examples/session.sh (docs/executor.md, "Sessions that can be restored"):
#   session-hook.sh checkpoint   ask the session to save its state into
#                                $ALLOT_CHECKPOINT_DIR and wait until it has (the
#                                executor kills the hook if its time runs out)
#   session-hook.sh restore      put the saved state back where the session reads it
set -e
case "$1" in
checkpoint)
    kill -USR1 "$ALLOT_COMMAND_PID"
    while [ ! -s "$ALLOT_CHECKPOINT_DIR/state" ]; do sleep 0.1; done
    ;;
restore)
    cp "$ALLOT_RESTORE_FROM/state" session-state.txt
    ;;
*)
    echo "usage: $0 checkpoint|restore" >&2
    exit 2
    ;;
esac
