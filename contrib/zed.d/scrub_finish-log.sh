#!/bin/sh
# tarn event hook (a ZED zedlet): a scrub ended; one syslog line with what it found.
line="pool $ZEVENT_POOL: scrub finished, ${ZEVENT_SCAN_BYTES_REPAIRED:-0} bytes repaired, ${ZEVENT_SCAN_ERRORS:-0} errors"
logger -t tarn-zed -- "$line" 2>/dev/null || echo "$line" >&2
exit 0
