//! Whether an advice command is safe to paste: `kb check` fails on a command that reads an
//! undefined shell variable (it expands to nothing and the command does something else), that
//! chains a state-changing action after a check so the action runs whatever the check showed,
//! or that resets a GPU without first making sure no process uses it.
//!
//! Commands name what the operator fills in as `<placeholders>`; a variable is fine when the
//! command sets it itself (`for`, `read`, `NAME=`) or when every shell has it (`$HOME`).

/// Variables every login shell has.
const STANDARD_VARS: &[&str] = &[
    "HOME",
    "PATH",
    "USER",
    "HOSTNAME",
    "PWD",
    "SHELL",
    "TMPDIR",
    "LD_LIBRARY_PATH",
    "CUDA_HOME",
    "CUDA_VISIBLE_DEVICES",
];

/// Words that change the state of a node, a GPU, a service or a job: run only when a check
/// said so.
const ACTIONS: &[&str] = &[
    "nvidia-smi -r",
    "nvidia-smi --gpu-reset",
    "--gpu-reset",
    "systemctl stop",
    "systemctl restart",
    "systemctl disable",
    "systemctl kill",
    "scontrol update",
    "rmmod ",
    "modprobe -r",
    "reboot",
    "kubectl delete",
    "kubectl drain",
    "kubectl cordon",
    "pkill ",
    "kill -9",
];

/// What is wrong with `command`, if anything.
pub fn command_problems(command: &str) -> Vec<&'static str> {
    let mut out = Vec::new();
    if undefined_variable(command).is_some() {
        out.push(
            "reads a shell variable the command never sets: write <placeholder> for what the \
             operator fills in",
        );
    }
    if unguarded_action(command) {
        out.push(
            "runs a state-changing action after a check whatever the check showed (`check; \
             action` or `check && action`): split them into two steps, or guard the action \
             (`check | grep -q <bad state> && action`, `... || action`)",
        );
    }
    let lower = command.to_ascii_lowercase();
    let resets = lower.contains("nvidia-smi -r") || lower.contains("--gpu-reset");
    if resets && !lower.contains("--query-compute-apps") {
        out.push(
            "resets a GPU without the no-process guard: `nvidia-smi --query-compute-apps=pid \
             --format=csv,noheader -i <gpu> | grep -q . || nvidia-smi -r -i <gpu>`",
        );
    }
    out
}

/// The first `$NAME` / `${NAME}` that `command` reads without setting it.
pub fn undefined_variable(command: &str) -> Option<String> {
    let bytes = command.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'$' {
            i += 1;
            continue;
        }
        let braced = bytes.get(i + 1) == Some(&b'{');
        let start = i + 1 + usize::from(braced);
        let end = command[start..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .map_or(command.len(), |n| start + n);
        let name = &command[start..end];
        i = end.max(i + 1);
        // `$1`, `$?`, `$(...)`, `$$` and awk's `$3` are not variables of the environment; a
        // lower-case name is a loop variable or another tool's (gdb's `$pc`), not a value the
        // operator was meant to fill in.
        if name.is_empty()
            || name.starts_with(|c: char| c.is_ascii_digit())
            || name.chars().any(|c| c.is_ascii_lowercase())
        {
            continue;
        }
        if STANDARD_VARS.contains(&name) || sets(command, name) {
            continue;
        }
        return Some(name.to_string());
    }
    None
}

/// Whether `command` sets `name` itself: `name=`, `for name in`, `read name`, `export name=`.
fn sets(command: &str, name: &str) -> bool {
    let assigned = command.match_indices(name).any(|(at, _)| {
        let before_ok = at == 0
            || !command[..at]
                .chars()
                .next_back()
                .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$' || c == '{');
        before_ok && command[at + name.len()..].starts_with('=')
    });
    assigned
        || command.contains(&format!("for {name} in"))
        || command.contains(&format!("read {name}"))
        || command.contains(&format!("read -r {name}"))
}

/// Whether an action runs after a check in sequence (`;`, `&&`, a new line) with nothing
/// that tests the check's finding: an action is fine as the first step, or right after its
/// guard (`guard || action`, `predicate && action` where the predicate is `grep -q`, `grep -c`,
/// `test` or `[ ]`), or inside `if ...; then ...; fi`; anything before that guard is a check
/// whose finding the action ignores.
fn unguarded_action(command: &str) -> bool {
    // Comments say what to do next; they are not run.
    let command: String = command
        .lines()
        .map(|l| l.split(" #").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n");
    if command.contains("if ") && command.contains("then") {
        return false;
    }
    let mut segments: Vec<(Option<Connector>, &str)> = Vec::new();
    let mut before = None;
    let mut rest = command.as_str();
    loop {
        let (segment, connector, next) = split_once_connector(rest);
        segments.push((before, segment));
        match connector {
            Some(c) => {
                before = Some(c);
                rest = next;
            }
            None => break,
        }
    }
    let acts = |s: &str| ACTIONS.iter().any(|a| s.contains(a));
    segments
        .iter()
        .enumerate()
        .any(|(i, (connector, segment))| {
            if i == 0 || !acts(segment) {
                return false;
            }
            let guard = segments[i - 1].1;
            let predicate = guard.contains("grep -q")
                || guard.contains("grep -c")
                || guard.trim_start().starts_with("test ")
                || guard.trim_start().starts_with('[');
            let guarded = match connector {
                Some(Connector::Or) => true,
                Some(Connector::And) => predicate,
                _ => acts(guard),
            };
            // A check before the guard whose finding the action ignores (`check && guard || action`).
            let ignored_check = segments[..i.saturating_sub(1)]
                .iter()
                .any(|(_, s)| !acts(s) && !s.trim().is_empty());
            !guarded || ignored_check
        })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Connector {
    Seq,
    And,
    Or,
}

/// The text before the first `;`, `&&`, `||` or new line, that connector, and the rest.
fn split_once_connector(text: &str) -> (&str, Option<Connector>, &str) {
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b';' | b'\n' => return (&text[..i], Some(Connector::Seq), &text[i + 1..]),
            b'&' if b.get(i + 1) == Some(&b'&') => {
                return (&text[..i], Some(Connector::And), &text[i + 2..])
            }
            b'|' if b.get(i + 1) == Some(&b'|') => {
                return (&text[..i], Some(Connector::Or), &text[i + 2..])
            }
            _ => i += 1,
        }
    }
    (text, None, "")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn undefined_variables_are_refused_placeholders_and_own_variables_pass() {
        assert_eq!(
            undefined_variable("scontrol show job $JOBID").as_deref(),
            Some("JOBID")
        );
        assert_eq!(
            undefined_variable("ls ${CKPT_DIR}/latest").as_deref(),
            Some("CKPT_DIR")
        );
        for ok in [
            "scontrol show job <jobid>",
            "for h in $(scontrol show hostnames <nodelist>); do ssh $h nvidia-smi; done",
            "N=4; echo $N",
            "awk '{print $3}' /proc/meminfo",
            "gdb -batch -ex 'x/3i $pc' --args python train.py",
            "echo $LD_LIBRARY_PATH",
            "ls $HOME/.cache",
            "echo $?",
        ] {
            assert_eq!(undefined_variable(ok), None, "{ok}");
        }
    }

    #[test]
    fn actions_chained_after_checks_need_a_guard() {
        for bad in [
            "systemctl status nvidia-fabricmanager; systemctl disable --now nvidia-fabricmanager",
            "nvidia-smi -q -d ROW_REMAPPER && nvidia-smi --query-compute-apps=pid --format=csv,noheader -i 0 | grep -q . || nvidia-smi -r -i 0",
            "scontrol show node <node> && scontrol update nodename=<node> state=resume",
        ] {
            assert!(unguarded_action(bad), "{bad}");
        }
        for ok in [
            "nvidia-smi --query-compute-apps=pid --format=csv,noheader -i <gpu> | grep -q . || nvidia-smi -r -i <gpu>",
            "systemctl status nvidia-fabricmanager",
            "systemctl is-failed nvidia-fabricmanager | grep -q failed && systemctl restart nvidia-fabricmanager",
            "dmesg -T | grep -i xid",
            "systemctl stop nvidia-persistenced; fuser -s /dev/nvidia* || { rmmod nvidia && modprobe nvidia; }",
            "echo 'options nvidia NVreg_EnableGpuFirmware=0' > /etc/modprobe.d/gsp.conf   # then reboot",
        ] {
            assert!(!unguarded_action(ok), "{ok}");
        }
    }

    #[test]
    fn gpu_resets_carry_the_no_process_guard() {
        assert!(!command_problems("nvidia-smi -r -i <gpu>").is_empty());
        assert!(command_problems(
            "nvidia-smi --query-compute-apps=pid --format=csv,noheader -i <gpu> | grep -q . || nvidia-smi -r -i <gpu>"
        )
        .is_empty());
    }
}
