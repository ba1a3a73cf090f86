#!/bin/sh
# tarn event hook (a ZED zedlet): a device changed state. Mails the admin when a device is
# FAULTED, UNAVAIL, REMOVED or DEGRADED, and always logs a line to syslog. Install into the
# hook directory (<rundir>/zed.d, or where TARN_ZEDLETS points) and make it executable;
# set TARN_ZED_EMAIL (in the daemon's environment) to the address to mail.
case "$ZEVENT_VDEV_STATE" in
    FAULTED | UNAVAIL | REMOVED | DEGRADED) bad=1 ;;
    *) bad=0 ;;
esac
line="pool $ZEVENT_POOL: device ${ZEVENT_VDEV_PATH:-?} is $ZEVENT_VDEV_STATE (was ${ZEVENT_VDEV_LASTSTATE:-?})"
logger -t tarn-zed -- "$line" 2>/dev/null || echo "$line" >&2
if [ "$bad" = 1 ] && [ -n "$TARN_ZED_EMAIL" ] && command -v mail >/dev/null; then
    {
        echo "$line"
        echo
        tarn pool status "$ZEVENT_POOL" 2>&1
    } | mail -s "tarn: pool $ZEVENT_POOL device $ZEVENT_VDEV_STATE" "$TARN_ZED_EMAIL"
fi
exit 0
