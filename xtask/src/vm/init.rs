//! The guest's side of the protocol: its `/init`, which writes the run's markers on the console,
//! and the nonce that makes those markers this run's own.

use std::time::{SystemTime, UNIX_EPOCH};

use crate::arch::Arch;
use crate::initramfs::MODULES_DIR;

/// The line the host writes on the console's input to have the guest's watchdog dump its
/// processes.
pub(super) const WATCHDOG_REQUEST: &str = "hotprof-xtask-dump";

/// Unique enough per run: our pid and the clock.
pub(super) fn nonce() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_nanos());
    format!("{:x}{:x}", std::process::id(), nanos)
}

/// The guest's `/init`: mounts what hotprof needs, runs `/run/cmd.sh` with its stdout and
/// stderr on their own serial ports, then reports on the console and powers off.
///
/// With `watchdog`, a background watchdog dumps every process's kernel stack when the host
/// asks (a line on the console's input, [`WATCHDOG_REQUEST`]), shortly before the host's
/// timeout, so a hang says where it hangs. The host asks by its own clock: the guest's has
/// been seen ahead of it by minutes (a 180 s watchdog by guest uptime fired 28 s into a
/// run on 6.1 in CI). The command itself runs in the foreground, where it keeps the default
/// signal dispositions (a shell's background jobs ignore SIGINT).
///
/// It must never exit (the kernel would panic), so it carries on past failed mounts, which
/// show up on the console.
///
/// With `modules`, it first loads the kernel modules the run image carries (in their names'
/// order) and waits up to 5 s for the command's ports to appear.
pub(super) fn init_script(marker: &str, watchdog: bool, arch: Arch, modules: bool) -> String {
    let [out_port, err_port] = arch.command_ports();
    let modules = if modules {
        format!(
            r#"for module in /{MODULES_DIR}/*.ko; do insmod "$module"; done
tries=50
while [ "$tries" -gt 0 ] && ! [ -c {out_port} -a -c {err_port} ]; do
    sleep 0.1
    tries=$((tries - 1))
done
"#
        )
    } else {
        String::new()
    };
    let watchdog = if watchdog {
        format!(
            r#"watchdog() {{
    # Waits for the host's request; a read that fails (no console input) must not dump.
    read -r request </dev/console || exit 0
    [ "$request" = "{WATCHDOG_REQUEST}" ] || exit 0
    echo "{marker} hang-begin"
    for d in /proc/[0-9]*; do
        args=$(tr '\0' ' ' <$d/cmdline 2>/dev/null)
        [ -n "$args" ] || continue
        echo "pid ${{d#/proc/}} $(sed -n 's/^State:\t//p' $d/status 2>/dev/null): $args"
        sed 's/^/    /' $d/stack 2>/dev/null
    done
    echo "{marker} hang-end"
}}
watchdog &
watchdog=$!
"#
        )
    } else {
        "watchdog=\n".to_owned()
    };
    format!(
        r#"#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin HOME=/root TERM=dumb
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
# As udev would: /dev/fd, which programs write through (sid's bpftrace compiles to /dev/fd/N).
ln -s /proc/self/fd /dev/fd
# Pseudo-terminals (`pty_run`, which drives `hotprof top` in a guest).
mkdir -p /dev/pts
mount -t devpts devpts /dev/pts
mount -t tracefs tracefs /sys/kernel/tracing
mount -t debugfs debugfs /sys/kernel/debug
mount -t bpf bpf /sys/fs/bpf
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /out
ulimit -l unlimited
{modules}# Raw: no newline translation or echo, so the host gets the command's bytes as written. The
# ports stay open in init (fds 3 and 4) until the end: a virtio console (arm64's ports) resets
# its settings when its last open file closes.
exec 3>{out_port} 4>{err_port}
stty -F {out_port} raw -echo
stty -F {err_port} raw -echo
{watchdog}echo "{marker} ready"
cd /out
sh /run/cmd.sh </dev/null >{out_port} 2>{err_port} 3>&- 4>&-
rc=$?
cd /
[ -n "$watchdog" ] && kill "$watchdog" 2>/dev/null
# Nothing but our lines on the console from here on.
echo 1 >/proc/sys/kernel/printk
echo "{marker} exit=$rc"
echo "{marker} out-begin"
# Compressed: the console's UART carries ~100 KB/s under TCG, and a scenario's JSON reports
# and logs shrink 10-27x (busy_exporter's 1.4 MB /out took ~20 s as it was).
tar -cf - -C /out . | gzip -1 | base64
echo "{marker} out-end"
poweroff -f
sleep 1000
"#
    )
}
