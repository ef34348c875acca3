//! The man pages and shell completions build.rs renders: they exist for every command `--help`
//! lists, `man -l` renders them, and the completions complete (bash: `kfdq su` to `kfdq suspend`).

use std::path::{Path, PathBuf};
use std::process::Command;

fn assets() -> PathBuf {
    Path::new(env!("OUT_DIR")).join("assets")
}

fn tool(name: &str) -> PathBuf {
    let found = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join(name))
        .find(|p| p.is_file());
    found.unwrap_or_else(|| {
        panic!("`{name}` is not installed: scripts/setup.sh --tests installs it (Debian)")
    })
}

/// The subcommands `kfdq --help` lists.
fn subcommands() -> Vec<String> {
    let out = Command::new(env!("CARGO_BIN_EXE_kfdq"))
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8(out.stdout).unwrap();
    let section = help
        .split("Commands:")
        .nth(1)
        .and_then(|s| s.split("Options:").next())
        .unwrap_or_else(|| panic!("no Commands: section in kfdq --help:\n{help}"));
    let names: Vec<String> = section
        .lines()
        .filter_map(|l| l.strip_prefix("  "))
        .filter(|l| !l.starts_with(' '))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| *n != "help")
        .map(str::to_string)
        .collect();
    assert!(names.len() >= 10, "too few commands parsed: {names:?}");
    names
}

fn man(page: &Path) -> String {
    let out = Command::new(tool("man"))
        .arg("-l")
        .arg(page)
        .env("MANPAGER", "cat")
        .env("MANWIDTH", "100")
        .env("LC_ALL", "C.UTF-8")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "man -l {} failed: {}",
        page.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    // Plain text: drop the overstrike bold/underline man emits for a terminal-less pager.
    let raw = String::from_utf8_lossy(&out.stdout);
    let mut text = String::new();
    for c in raw.chars() {
        if c == '\u{8}' {
            text.pop();
        } else {
            text.push(c);
        }
    }
    text
}

#[test]
fn man_renders_kfdq_1_with_every_command_and_the_version() {
    let text = man(&assets().join("man/kfdq.1"));
    assert!(text.contains("kfdq - "), "no NAME line:\n{text}");
    assert!(
        text.contains(env!("CARGO_PKG_VERSION")),
        "no version in:\n{text}"
    );
    for cmd in subcommands() {
        assert!(
            text.contains(&format!("kfdq-{cmd}(1)")) || text.contains(&cmd),
            "kfdq.1 does not mention {cmd}"
        );
    }
}

#[test]
fn every_command_has_a_page_that_says_what_its_help_says() {
    for cmd in subcommands() {
        let page = assets().join(format!("man/kfdq-{cmd}.1"));
        assert!(page.is_file(), "no man page {}", page.display());
        let text = man(&page);
        let help = Command::new(env!("CARGO_BIN_EXE_kfdq"))
            .args([cmd.as_str(), "--help"])
            .output()
            .unwrap();
        let help = String::from_utf8(help.stdout).unwrap();
        // Every long option of the command's --help is on its page.
        for opt in help
            .split_whitespace()
            .filter(|w| w.starts_with("--") && w.len() > 2)
            .map(|w| w.trim_end_matches([',', '.', ':', ')', ']']))
        {
            let opt = opt.split(['=', '[', '<']).next().unwrap();
            assert!(
                text.contains(opt),
                "kfdq-{cmd}.1 lacks {opt} that `kfdq {cmd} --help` shows"
            );
        }
    }
    let kfdqd = man(&assets().join("man/kfdqd.8"));
    for opt in ["--config", "--socket", "--check", "SIGHUP"] {
        assert!(kfdqd.contains(opt), "kfdqd.8 lacks {opt}:\n{kfdqd}");
    }
}

/// What bash completes for `words` (the last one being completed), with kfdq's completion.
fn bash_complete(words: &[&str]) -> Vec<String> {
    let script = assets().join("completions/bash/kfdq");
    let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
    let line = words.join(" ");
    let program = format!(
        "source '{}'\nCOMP_WORDS=({})\nCOMP_CWORD={}\nCOMP_LINE='{line}'\nCOMP_POINT={}\n\
         _kfdq kfdq '{}' '{}'\nprintf '%s\\n' \"${{COMPREPLY[@]}}\"\n",
        script.display(),
        quoted.join(" "),
        words.len() - 1,
        line.len(),
        words[words.len() - 1],
        words[words.len().saturating_sub(2)],
    );
    let out = Command::new(tool("bash"))
        .args(["--norc", "--noprofile", "-c", &program])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "bash completion failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| l.trim().to_string())
        .filter(|l| !l.is_empty())
        .collect()
}

#[test]
fn bash_completes_kfdq_su_to_suspend() {
    assert_eq!(bash_complete(&["kfdq", "su"]), ["suspend"]);
    assert_eq!(bash_complete(&["kfdq", "suspend", "--le"]), ["--level"]);
    let levels = bash_complete(&["kfdq", "suspend", "--level", ""]);
    for l in ["hold", "deactivate", "suspend"] {
        assert!(levels.iter().any(|x| x == l), "--level offers {levels:?}");
    }
}

#[test]
fn zsh_and_fish_completions_are_written_and_zsh_parses() {
    for name in ["kfdq", "kfdqd"] {
        let zsh = assets().join(format!("completions/zsh/_{name}"));
        let fish = assets().join(format!("completions/fish/{name}.fish"));
        let z = std::fs::read_to_string(&zsh).unwrap();
        assert!(
            z.starts_with(&format!("#compdef {name}")),
            "{}",
            zsh.display()
        );
        let f = std::fs::read_to_string(&fish).unwrap();
        assert!(
            f.contains(&format!("complete -c {name}")),
            "{}",
            fish.display()
        );
        let out = Command::new(tool("zsh"))
            .arg("-n")
            .arg(&zsh)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "zsh -n {}: {}",
            zsh.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// The SYNOPSIS line of a rendered page (`man -l` output).
fn synopsis(text: &str) -> String {
    let after = text
        .split("SYNOPSIS")
        .nth(1)
        .unwrap_or_else(|| panic!("no SYNOPSIS:\n{text}"));
    after
        .split("DESCRIPTION")
        .next()
        .unwrap()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// An option that takes a value shows it in the SYNOPSIS (`[--level LEVEL]`), and a flag shows
/// none: clap_mangen alone writes `[--level]`, which reads as a flag.
#[test]
fn synopsis_shows_the_value_an_option_takes() {
    let suspend = synopsis(&man(&assets().join("man/kfdq-suspend.1")));
    assert!(suspend.contains("[--level LEVEL]"), "{suspend}");
    assert!(
        suspend.contains("[--json]"),
        "a flag has no value: {suspend}"
    );
    let kfdqd = synopsis(&man(&assets().join("man/kfdqd.8")));
    assert!(
        kfdqd.contains("[--config CONFIG]") || kfdqd.contains("[--config FILE]"),
        "{kfdqd}"
    );
    for cmd in subcommands() {
        let text = synopsis(&man(&assets().join(format!("man/kfdq-{cmd}.1"))));
        let help = Command::new(env!("CARGO_BIN_EXE_kfdq"))
            .args([cmd.as_str(), "--help"])
            .output()
            .unwrap();
        let help = String::from_utf8(help.stdout).unwrap();
        // `--help` lists an option that takes a value as `--name <VALUE>`.
        for line in help.lines().map(str::trim_start) {
            let mut words = line.split_whitespace();
            let (Some(first), Some(second)) = (words.next(), words.next()) else {
                continue;
            };
            let opt = first.trim_end_matches(',');
            let (opt, value) = if opt.starts_with("--") {
                (opt, second)
            } else if opt.starts_with('-') && second.starts_with("--") {
                (second, words.next().unwrap_or(""))
            } else {
                continue;
            };
            if let Some(v) = value.strip_prefix('<').and_then(|v| v.strip_suffix('>')) {
                assert!(
                    text.contains(&format!("{opt} {v}")),
                    "kfdq-{cmd}.1's SYNOPSIS lacks `{opt} {v}`: {text}"
                );
            }
        }
    }
}
