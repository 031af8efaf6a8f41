#!/bin/sh
# Runs one rank's program (the rest of the command line) and records how it ended:
# "HOST ROLE STATUS" in $DIST_DIFF_OUT/rc.HOST.PID (the test bed's hosts share /tmp). A SIGTERM
# or SIGINT is passed on to the program, which is waited for, so nothing outlives the wrapper.
"$@" &
child=$!
trap 'kill -TERM $child 2>/dev/null' TERM INT
status=0
wait $child || status=$?
# `wait` returns early (above 128) when a trapped signal arrives: wait for the program itself.
while kill -0 $child 2>/dev/null; do
    status=0
    wait $child || status=$?
done
echo "$(hostname) ${DMLC_ROLE:-worker} $status" >"$DIST_DIFF_OUT/rc.$(hostname).$$"
exit $status
