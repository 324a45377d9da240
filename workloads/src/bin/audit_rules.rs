//! `audit_rules enable|add N|clear|count|status`: load audit syscall rules
//! through NETLINK_AUDIT, as auditctl would (the guest has no auditctl).
//!
//! Why: with no rules loaded, syscall auditing stays in "dummy" mode and the
//! kernel's `__audit_filter_op` hardly runs. With any exit rule loaded it
//! runs on every syscall exit of every audited task, walking all the exit
//! rules, even for syscalls no rule names. `add N` therefore gives a
//! benchmark a knob for the per-syscall cost of `__audit_filter_op` (on
//! getpid, say) without ever producing an audit record.

use std::process::ExitCode;

use workloads::audit::{AUDIT_UID, AuditSocket, FIRST_UID, MAX_SYSCALL_NR, RequestError, Rule};
use workloads::cli::{Opt, parse_int};
use workloads::{Args, Error, Report, run_main};

const NAME: &str = "audit_rules";
const USAGE: &str = "\
audit_rules - load kernel audit syscall rules over NETLINK_AUDIT

Usage:
  audit_rules enable                AUDIT_SET enabled=1
  audit_rules add N [--syscall NR]  add N exit rules that never match (1..=10000)
  audit_rules clear [--all]         delete the rules `add` loaded (--all: every rule)
  audit_rules count                 count the loaded rules
  audit_rules status                print the kernel's audit status

Each rule `add` loads is what
  auditctl -a always,exit -F arch=b64 -S NR -F uid=UID -k hotprof_workloads
would load, with NR = acct's number (163 on x86-64, 89 on arm64) unless
--syscall says otherwise (0..=2031) and UID = 1000, 1001, ... continuing
after the uids of rules already loaded, so every rule is distinct. No task in the guest has those uids, so the rules
never match and produce no records, yet with any exit rule loaded the
kernel's __audit_filter_op runs on every syscall exit (getpid included);
with none it hardly runs. (Linux 6.1 has no __audit_filter_op: there the
per-exit walk is inlined in audit_filter_syscall.) `clear` finds the rules
by their key.

Needs CAP_AUDIT_CONTROL in the initial user and pid namespaces. Tasks only
audit syscalls if auditing was enabled when they were forked, so boot with
audit=1 (or run `enable` before starting the workload).

Output (last line):
  audit_rules: op=enable enabled=E rules=R
  audit_rules: op=add added=N first_uid=U syscall=NR rules=R ours=O
  audit_rules: op=clear deleted=D rules=R ours=O
  audit_rules: op=count rules=R ours=O
  audit_rules: op=status enabled=E failure=F auditd_pid=P backlog=B backlog_limit=L lost=X rules=R ours=O
    rules  all loaded rules, of every filter list
    ours   rules carrying the key hotprof_workloads
Kernel errors are reported by name, e.g. EPERM (not root), EEXIST (rule
already loaded); exit status 1.
";

/// Default syscall the rules name: acct(2), which no workload calls.
const DEFAULT_SYSCALL: u64 = libc::SYS_acct as u64;

fn main() -> ExitCode {
    run_main(NAME, USAGE, &[Opt::Value("syscall"), Opt::Flag("all")], run)
}

fn run(args: &Args) -> Result<Report, Error> {
    let (command, rest) = match args.all_positionals() {
        [command, rest @ ..] => (command.as_str(), rest),
        [] => {
            return Err(Error::usage(
                "missing subcommand (enable, add, clear, count, status)",
            ));
        }
    };
    check_options(command, args)?;
    match (command, rest) {
        ("enable", []) => enable(),
        ("add", [n]) => {
            let n = parse_int("N", n, 1, 10_000)?;
            let syscall = match args.value("syscall") {
                Some(text) => parse_int("--syscall", text, 0, MAX_SYSCALL_NR.into())?,
                None => DEFAULT_SYSCALL,
            };
            add(n as u32, syscall as u32)
        }
        ("add", _) => Err(Error::usage("add takes one argument: N")),
        ("clear", []) => clear(args.flag("all")),
        ("count", []) => count(),
        ("status", []) => status(),
        ("enable" | "clear" | "count" | "status", _) => {
            Err(Error::usage(format!("{command} takes no arguments")))
        }
        _ => Err(Error::usage(format!("unknown subcommand '{command}'"))),
    }
}

/// Options only make sense with the subcommand they belong to.
fn check_options(command: &str, args: &Args) -> Result<(), Error> {
    if args.value("syscall").is_some() && command != "add" {
        return Err(Error::usage("--syscall only applies to add"));
    }
    if args.flag("all") && command != "clear" {
        return Err(Error::usage("--all only applies to clear"));
    }
    Ok(())
}

/// Turns a netlink failure into the one-line error the program prints.
fn kernel(what: &str) -> impl FnOnce(RequestError) -> Error + '_ {
    move |err| Error::failed(format!("{what}: {err}"))
}

fn open() -> Result<AuditSocket, Error> {
    AuditSocket::open().map_err(kernel("opening the audit socket"))
}

/// Rule counts: all loaded rules and those carrying our key.
struct Counts {
    rules: usize,
    ours: usize,
}

fn counts(socket: &mut AuditSocket) -> Result<Counts, Error> {
    let rules = socket.list_rules().map_err(kernel("AUDIT_LIST_RULES"))?;
    Ok(Counts {
        rules: rules.len(),
        ours: rules.iter().filter(|rule| rule.is_hotprof()).count(),
    })
}

fn enable() -> Result<Report, Error> {
    let mut socket = open()?;
    socket
        .set_enabled(1)
        .map_err(kernel("AUDIT_SET enabled=1"))?;
    let status = socket.status().map_err(kernel("AUDIT_GET"))?;
    let counts = counts(&mut socket)?;
    Ok(Report::new(NAME)
        .field("op", "enable")
        .field("enabled", status.enabled)
        .field("rules", counts.rules))
}

fn add(n: u32, syscall: u32) -> Result<Report, Error> {
    let mut socket = open()?;
    let existing = socket.list_rules().map_err(kernel("AUDIT_LIST_RULES"))?;
    let first_uid = next_free_uid(&existing);
    for i in 0..n {
        let uid = first_uid + i;
        socket
            .add_rule(&Rule::hotprof(syscall, uid))
            .map_err(|err| {
                Error::failed(format!(
                    "AUDIT_ADD_RULE (rule {} of {n}, -S {syscall} -F uid={uid}): {err}",
                    i + 1
                ))
            })?;
    }
    let counts = counts(&mut socket)?;
    Ok(Report::new(NAME)
        .field("op", "add")
        .field("added", n)
        .field("first_uid", first_uid)
        .field("syscall", syscall)
        .field("rules", counts.rules)
        .field("ours", counts.ours))
}

/// The uid after the highest one our loaded rules use, so repeated `add`
/// calls extend the set instead of failing with EEXIST.
fn next_free_uid(rules: &[Rule]) -> u32 {
    rules
        .iter()
        .filter(|rule| rule.is_hotprof())
        .filter_map(|rule| rule.field_value(AUDIT_UID))
        .map(|uid| uid.saturating_add(1))
        .max()
        .unwrap_or(FIRST_UID)
        .max(FIRST_UID)
}

fn clear(all: bool) -> Result<Report, Error> {
    let mut socket = open()?;
    let rules = socket.list_rules().map_err(kernel("AUDIT_LIST_RULES"))?;
    let mut deleted = 0u64;
    for rule in rules.iter().filter(|rule| all || rule.is_hotprof()) {
        socket.delete_rule(rule).map_err(kernel("AUDIT_DEL_RULE"))?;
        deleted += 1;
    }
    let counts = counts(&mut socket)?;
    Ok(Report::new(NAME)
        .field("op", "clear")
        .field("deleted", deleted)
        .field("rules", counts.rules)
        .field("ours", counts.ours))
}

fn count() -> Result<Report, Error> {
    let mut socket = open()?;
    let counts = counts(&mut socket)?;
    Ok(Report::new(NAME)
        .field("op", "count")
        .field("rules", counts.rules)
        .field("ours", counts.ours))
}

fn status() -> Result<Report, Error> {
    let mut socket = open()?;
    let status = socket.status().map_err(kernel("AUDIT_GET"))?;
    let counts = counts(&mut socket)?;
    Ok(Report::new(NAME)
        .field("op", "status")
        .field("enabled", status.enabled)
        .field("failure", status.failure)
        .field("auditd_pid", status.pid)
        .field("backlog", status.backlog)
        .field("backlog_limit", status.backlog_limit)
        .field("lost", status.lost)
        .field("rules", counts.rules)
        .field("ours", counts.ours))
}

#[cfg(test)]
mod tests {
    use super::*;
    use workloads::audit::HOTPROF_KEY;

    #[test]
    fn uids_continue_after_our_rules_only() {
        assert_eq!(next_free_uid(&[]), FIRST_UID);
        let ours = [Rule::hotprof(163, 1000), Rule::hotprof(163, 1004)];
        assert_eq!(next_free_uid(&ours), 1005);
    }

    #[test]
    fn key_constant_matches_usage_text() {
        assert!(USAGE.contains(HOTPROF_KEY));
    }
}
