//! Every `berth` command line in the documentation's shell examples
//! parses with today's command line: a renamed command or option, or one
//! that is gone, fails here with the page and line. (tests/docs.sh runs
//! the examples marked as tested; this covers the rest, whose images and
//! paths are placeholders.)

use std::path::{Path, PathBuf};

use clap::{error::ErrorKind, Parser};

use crate::cli::Cli;

/// Tokens that end one command of a shell line.
const SEPARATORS: &[&str] = &["&&", "||", ";", "|", ">", ">>", "2>", "2>&1", "<", "&"];

/// The Markdown pages: README.md and everything under docs/.
fn pages() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut out = vec![root.join("README.md")];
    let mut dirs = vec![root.join("docs")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// (line number, line) of each line inside a `sh`, `bash` or `console`
/// fence.
fn shell_lines(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut inside = false;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if let Some(info) = trimmed.strip_prefix("```") {
            inside = !inside
                && matches!(
                    info.split_whitespace().next(),
                    Some("sh" | "bash" | "console")
                );
            continue;
        }
        if inside {
            out.push((i + 1, trimmed.trim_start_matches("$ ").to_string()));
        }
    }
    out
}

/// The arguments of each `berth` command on a line, or none where the
/// line is a synopsis (`[OPTIONS]`, `A|B`, `...`) rather than a command.
fn berth_commands(line: &str) -> Vec<Vec<String>> {
    let code = match line.find(" #") {
        Some(i) => &line[..i],
        None => line,
    };
    let alternatives = code
        .as_bytes()
        .windows(3)
        .any(|w| w[1] == b'|' && !w[0].is_ascii_whitespace() && !w[2].is_ascii_whitespace());
    if code.starts_with('#')
        || code.contains('[')
        || code.contains("...")
        || code.contains('<')
        || alternatives
    {
        return Vec::new();
    }
    let Some(words) = shlex::split(code) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut i = 0;
    while i < words.len() {
        let starts = i == 0 || SEPARATORS.contains(&words[i - 1].as_str());
        if starts && words[i] == "berth" {
            let args: Vec<String> = words[i..]
                .iter()
                .take_while(|w| !SEPARATORS.contains(&w.as_str()))
                .cloned()
                .collect();
            i += args.len();
            out.push(args);
        } else {
            i += 1;
        }
    }
    out
}

#[test]
fn every_documented_command_line_parses() {
    let mut checked = 0;
    let mut wrong = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        for (n, line) in shell_lines(&text) {
            for args in berth_commands(&line) {
                checked += 1;
                if let Err(e) = Cli::try_parse_from(&args) {
                    if !matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
                        let first = e.to_string().lines().next().unwrap_or("").to_string();
                        wrong.push(format!("{}:{n}: {line}\n    {first}", page.display()));
                    }
                }
            }
        }
    }
    assert!(checked > 40, "only {checked} command lines found");
    assert!(
        wrong.is_empty(),
        "{} documented command lines do not parse:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

#[test]
fn synopsis_lines_are_not_commands() {
    assert!(berth_commands("berth run [OPTIONS] IMAGE").is_empty());
    assert!(berth_commands("berth completion bash|zsh|fish").is_empty());
    assert_eq!(
        berth_commands("echo x && berth run -e A img sh -c 'a | b' | sort # note"),
        vec![vec!["berth", "run", "-e", "A", "img", "sh", "-c", "a | b"]]
    );
}

/// Every relative link of the pages (`[text](path)`, `#anchor` dropped)
/// names a file that exists: the book and a forge show the same pages.
#[test]
fn every_relative_link_resolves() {
    let mut broken = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        let dir = page.parent().unwrap();
        for (n, line) in text.lines().enumerate() {
            for target in line.split("](").skip(1).filter_map(|s| s.split(')').next()) {
                let path = target.split('#').next().unwrap_or("");
                if path.is_empty() || path.contains("://") || path.starts_with("mailto:") {
                    continue;
                }
                if !dir.join(path).exists() {
                    broken.push(format!("{}:{}: {target}", page.display(), n + 1));
                }
            }
        }
    }
    assert!(
        broken.is_empty(),
        "links to nothing:\n{}",
        broken.join("\n")
    );
}
