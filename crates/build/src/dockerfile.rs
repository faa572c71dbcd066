//! Dockerfiles: the `parse-dockerfile` crate tokenizes (directives, line
//! continuations, heredocs, exec and shell forms, flags); this module turns
//! its instructions into berth's build steps, with line numbers, and does
//! what the crate leaves to the builder: word splitting of ENV, ARG and
//! LABEL, and variable substitution (`$V`, `${V}`, `${V:-w}`, `${V:+w}`,
//! quotes and escapes) as BuildKit does it.

use std::collections::BTreeMap;

use parse_dockerfile::{Command, Instruction, JsonOrStringArray, Source};

use crate::{Error, Result};

/// A command in exec form (argv) or shell form (a string for the SHELL).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Cmd {
    /// `["prog", "arg"]`.
    Exec(Vec<String>),
    /// `prog arg`, run with the stage's SHELL.
    Shell(String),
}

/// One instruction of a stage, after FROM.
#[derive(Debug, Clone)]
pub struct Step {
    /// 1-based line of the instruction in the Dockerfile.
    pub line: usize,
    /// The instruction as written (continuations joined), for messages.
    pub text: String,
    /// What it does.
    pub kind: Kind,
}

/// What an instruction does (arguments still unexpanded where Docker
/// expands them at build time).
#[derive(Debug, Clone)]
pub enum Kind {
    /// `RUN`.
    Run(Cmd),
    /// `COPY` or `ADD` (`add`: local tar archives are unpacked).
    Copy {
        /// `ADD` rather than `COPY`.
        add: bool,
        /// `--from=STAGE|IMAGE`.
        from: Option<String>,
        /// `--chown=USER[:GROUP]`.
        chown: Option<String>,
        /// `--chmod=MODE` (octal).
        chmod: Option<String>,
        /// Sources (globs allowed), relative to the context or the stage.
        sources: Vec<String>,
        /// Destination.
        dest: String,
    },
    /// `ENV k=v ...` (raw words).
    Env(Vec<(String, String)>),
    /// `ARG NAME[=default] ...`.
    Arg(Vec<(String, Option<String>)>),
    /// `WORKDIR`.
    Workdir(String),
    /// `USER`.
    User(String),
    /// `ENTRYPOINT`.
    Entrypoint(Cmd),
    /// `CMD`.
    Cmd(Cmd),
    /// `LABEL k=v ...`.
    Label(Vec<(String, String)>),
    /// `EXPOSE 80/tcp ...`.
    Expose(Vec<String>),
    /// `VOLUME`.
    Volume(Vec<String>),
    /// `SHELL ["sh", "-c"]`.
    Shell(Vec<String>),
    /// `STOPSIGNAL`.
    Stopsignal(String),
    /// `HEALTHCHECK [options] CMD ...` (`None`: `HEALTHCHECK NONE`).
    Healthcheck(Option<(Vec<(String, String)>, Cmd)>),
    /// `MAINTAINER` (recorded as the config's author).
    Maintainer(String),
}

/// A build stage: `FROM image [AS name]` and its steps.
#[derive(Debug, Clone)]
pub struct Stage {
    /// `AS name`, lower-cased.
    pub name: Option<String>,
    /// The image (unexpanded: global ARGs apply).
    pub from: String,
    /// Line of the FROM.
    pub line: usize,
    /// `--platform` of the FROM, if given.
    pub platform: Option<String>,
    /// The stage's instructions.
    pub steps: Vec<Step>,
}

/// A parsed Dockerfile.
#[derive(Debug, Clone)]
pub struct Dockerfile {
    /// ARGs before the first FROM (visible in FROM lines).
    pub global_args: Vec<(String, Option<String>)>,
    /// The stages in order.
    pub stages: Vec<Stage>,
    /// The escape character (`\` unless a directive says otherwise).
    pub escape: char,
}

fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())]
        .iter()
        .filter(|b| **b == b'\n')
        .count()
        + 1
}

fn bad(line: usize, msg: impl Into<String>) -> Error {
    Error::Dockerfile {
        line,
        msg: msg.into(),
    }
}

/// Parses a Dockerfile; errors name the line.
pub fn parse(text: &str) -> Result<Dockerfile> {
    let parsed = parse_dockerfile::parse(text).map_err(|e| bad(e.line(), e.to_string()))?;
    let escape = parsed
        .parser_directives
        .escape
        .as_ref()
        .map(|d| d.value.value)
        .unwrap_or('\\');
    let mut out = Dockerfile {
        global_args: Vec::new(),
        stages: Vec::new(),
        escape,
    };
    for inst in &parsed.instructions {
        let span = instruction_span(inst);
        let line = line_of(text, span.start);
        let end = text[span.start..]
            .find('\n')
            .map(|n| span.start + n)
            .unwrap_or(text.len());
        let first_line = text[span.start..end].trim().to_string();
        if let Instruction::From(f) = inst {
            let mut platform = None;
            for flag in &f.options {
                match &*flag.name.value {
                    "platform" => platform = flag.value.as_ref().map(|v| v.value.to_string()),
                    other => return Err(bad(line, format!("FROM --{other} is not supported"))),
                }
            }
            out.stages.push(Stage {
                name: f.as_.as_ref().map(|(_, n)| n.value.to_lowercase()),
                from: f.image.value.to_string(),
                line,
                platform,
                steps: Vec::new(),
            });
            continue;
        }
        let kind = convert(inst, line, escape)?;
        match out.stages.last_mut() {
            Some(stage) => stage.steps.push(Step {
                line,
                text: first_line,
                kind,
            }),
            None => match kind {
                Kind::Arg(args) => out.global_args.extend(args),
                _ => return Err(bad(line, "only ARG may come before the first FROM")),
            },
        }
    }
    if out.stages.is_empty() {
        return Err(bad(
            1,
            "no FROM instruction: a Dockerfile starts FROM an image (or scratch)",
        ));
    }
    Ok(out)
}

fn instruction_span(inst: &Instruction<'_>) -> std::ops::Range<usize> {
    match inst {
        Instruction::Add(i) => i.add.span.clone(),
        Instruction::Arg(i) => i.arg.span.clone(),
        Instruction::Cmd(i) => i.cmd.span.clone(),
        Instruction::Copy(i) => i.copy.span.clone(),
        Instruction::Entrypoint(i) => i.entrypoint.span.clone(),
        Instruction::Env(i) => i.env.span.clone(),
        Instruction::Expose(i) => i.expose.span.clone(),
        Instruction::From(i) => i.from.span.clone(),
        Instruction::Healthcheck(i) => i.healthcheck.span.clone(),
        Instruction::Label(i) => i.label.span.clone(),
        Instruction::Maintainer(i) => i.maintainer.span.clone(),
        Instruction::Onbuild(i) => i.onbuild.span.clone(),
        Instruction::Run(i) => i.run.span.clone(),
        Instruction::Shell(i) => i.shell.span.clone(),
        Instruction::Stopsignal(i) => i.stopsignal.span.clone(),
        Instruction::User(i) => i.user.span.clone(),
        Instruction::Volume(i) => i.volume.span.clone(),
        Instruction::Workdir(i) => i.workdir.span.clone(),
        #[allow(unreachable_patterns)]
        _ => 0..0,
    }
}

fn command(c: &Command<'_>, escape: char) -> Cmd {
    match c {
        Command::Exec(args) => Cmd::Exec(args.value.iter().map(|a| a.value.to_string()).collect()),
        Command::Shell(s) => Cmd::Shell(clean_shell(s.value, escape)),
        #[allow(unreachable_patterns)]
        _ => Cmd::Shell(String::new()),
    }
}

/// A shell-form command as written: escaped newlines joined and comment
/// lines inside the continuation dropped, as Docker passes it to the shell.
pub fn clean_shell(text: &str, escape: char) -> String {
    let mut out = String::new();
    let mut lines = text.split('\n').peekable();
    while let Some(line) = lines.next() {
        let trimmed = line.trim_start();
        if !out.is_empty() && trimmed.starts_with('#') {
            continue;
        }
        let body = line.trim_end();
        match body.strip_suffix(escape) {
            Some(joined) if lines.peek().is_some() => out.push_str(joined),
            _ => {
                out.push_str(line);
                if lines.peek().is_some() {
                    out.push('\n');
                }
            }
        }
    }
    out.trim().to_string()
}

fn flags(
    options: &[parse_dockerfile::Flag<'_>],
    allowed: &[&str],
    what: &str,
    line: usize,
) -> Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for f in options {
        let name = f.name.value.to_string();
        if name == "link" {
            // An optimisation hint for BuildKit's layer rebasing: same result.
            continue;
        }
        if !allowed.contains(&name.as_str()) {
            return Err(bad(line, format!("{what} --{name} is not supported")));
        }
        out.insert(
            name,
            f.value
                .as_ref()
                .map(|v| v.value.to_string())
                .unwrap_or_default(),
        );
    }
    Ok(out)
}

fn convert(inst: &Instruction<'_>, line: usize, escape: char) -> Result<Kind> {
    Ok(match inst {
        Instruction::Run(r) => {
            flags(&r.options, &[], "RUN", line)?;
            if !r.here_docs.is_empty() {
                // `RUN <<EOF ... EOF`: the document is the script.
                let script: Vec<String> = r.here_docs.iter().map(|h| h.value.to_string()).collect();
                Kind::Run(Cmd::Shell(script.join("\n")))
            } else {
                Kind::Run(command(&r.arguments, escape))
            }
        }
        Instruction::Copy(c) => {
            let f = flags(&c.options, &["from", "chown", "chmod"], "COPY", line)?;
            Kind::Copy {
                add: false,
                from: f.get("from").cloned(),
                chown: f.get("chown").cloned(),
                chmod: f.get("chmod").cloned(),
                sources: sources(&c.src, line)?,
                dest: c.dest.value.to_string(),
            }
        }
        Instruction::Add(c) => {
            let f = flags(&c.options, &["chown", "chmod"], "ADD", line)?;
            let srcs = sources(&c.src, line)?;
            if let Some(url) = srcs.iter().find(|s| s.contains("://")) {
                return Err(bad(
                    line,
                    format!("ADD {url}: remote sources are not supported; download it in a RUN step (curl, wget) or into the context"),
                ));
            }
            Kind::Copy {
                add: true,
                from: None,
                chown: f.get("chown").cloned(),
                chmod: f.get("chmod").cloned(),
                sources: srcs,
                dest: c.dest.value.to_string(),
            }
        }
        Instruction::Env(e) => Kind::Env(key_values(&e.arguments.value, true, escape, line)?),
        Instruction::Label(l) => Kind::Label(key_values(&l.arguments.value, false, escape, line)?),
        Instruction::Arg(a) => Kind::Arg(
            split_words(&a.arguments.value, escape)
                .into_iter()
                .map(|w| match w.split_once('=') {
                    Some((k, v)) => (k.to_string(), Some(v.to_string())),
                    None => (w, None),
                })
                .collect(),
        ),
        Instruction::Workdir(w) => Kind::Workdir(w.arguments.value.to_string()),
        Instruction::User(u) => Kind::User(u.arguments.value.to_string()),
        Instruction::Entrypoint(e) => Kind::Entrypoint(command(&e.arguments, escape)),
        Instruction::Cmd(c) => Kind::Cmd(command(&c.arguments, escape)),
        Instruction::Expose(e) => {
            Kind::Expose(e.arguments.iter().map(|a| a.value.to_string()).collect())
        }
        Instruction::Volume(v) => Kind::Volume(match &v.arguments {
            JsonOrStringArray::Json(a) => a.value.iter().map(|s| s.value.to_string()).collect(),
            JsonOrStringArray::String(a) => a.iter().map(|s| s.value.to_string()).collect(),
        }),
        Instruction::Shell(s) => {
            Kind::Shell(s.arguments.iter().map(|a| a.value.to_string()).collect())
        }
        Instruction::Stopsignal(s) => Kind::Stopsignal(s.arguments.value.to_string()),
        Instruction::Maintainer(m) => Kind::Maintainer(m.name.value.to_string()),
        Instruction::Healthcheck(h) => match &h.arguments {
            parse_dockerfile::HealthcheckArguments::Cmd { arguments, .. } => {
                let f = flags(
                    &h.options,
                    &[
                        "interval",
                        "timeout",
                        "start-period",
                        "start-interval",
                        "retries",
                    ],
                    "HEALTHCHECK",
                    line,
                )?;
                Kind::Healthcheck(Some((f.into_iter().collect(), command(arguments, escape))))
            }
            _ => Kind::Healthcheck(None),
        },
        Instruction::Onbuild(_) => return Err(bad(line, "ONBUILD is not supported")),
        #[allow(unreachable_patterns)]
        _ => return Err(bad(line, "this instruction is not supported")),
    })
}

fn sources(src: &[Source<'_>], line: usize) -> Result<Vec<String>> {
    src.iter()
        .map(|s| match s {
            Source::Path(p) => Ok(p.value.to_string()),
            _ => Err(bad(
                line,
                "here-documents as COPY/ADD sources are not supported",
            )),
        })
        .collect()
}

/// Splits `k=v k2="v 2"` (or, for ENV, the legacy `key value`) into raw
/// pairs; values keep their quotes for [`expand`].
fn key_values(raw: &str, legacy: bool, escape: char, line: usize) -> Result<Vec<(String, String)>> {
    let words = split_words(raw, escape);
    let first_has_eq = words.first().is_some_and(|w| w.contains('='));
    if !first_has_eq {
        if legacy {
            let trimmed = raw.trim();
            let (k, v) = trimmed
                .split_once(char::is_whitespace)
                .ok_or_else(|| bad(line, "ENV needs NAME=VALUE (or NAME VALUE)"))?;
            return Ok(vec![(k.to_string(), v.trim().to_string())]);
        }
        return Err(bad(line, "LABEL needs KEY=VALUE pairs"));
    }
    words
        .into_iter()
        .map(|w| match w.split_once('=') {
            Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
            _ => Err(bad(line, format!("{w:?}: expected KEY=VALUE"))),
        })
        .collect()
}

/// Splits at unquoted, unescaped whitespace; quotes and escapes are kept.
pub fn split_words(raw: &str, escape: char) -> Vec<String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut quote: Option<char> = None;
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (_, c) if c == escape => {
                cur.push(c);
                if let Some(n) = chars.next() {
                    cur.push(n);
                }
            }
            (None, '"' | '\'') => {
                quote = Some(c);
                cur.push(c);
            }
            (Some(q), c) if c == q => {
                quote = None;
                cur.push(c);
            }
            (None, c) if c.is_whitespace() => {
                if !cur.is_empty() {
                    words.push(std::mem::take(&mut cur));
                }
            }
            _ => cur.push(c),
        }
    }
    if !cur.is_empty() {
        words.push(cur);
    }
    words
}

/// Expands variables in `word` from `vars` and removes quotes and escapes,
/// as Docker does for ENV, LABEL, COPY, WORKDIR, USER and the like: single
/// quotes are literal, double quotes allow `$`, an escaped `$` stays.
pub fn expand(word: &str, vars: &dyn Fn(&str) -> Option<String>, escape: char) -> String {
    let mut out = String::new();
    let chars: Vec<char> = word.chars().collect();
    let mut i = 0;
    let mut quote: Option<char> = None;
    while i < chars.len() {
        let c = chars[i];
        if c == escape && quote != Some('\'') && i + 1 < chars.len() {
            out.push(chars[i + 1]);
            i += 2;
            continue;
        }
        match (quote, c) {
            (None, '\'' | '"') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (q, '$') if q != Some('\'') => {
                let (value, used) = variable(&chars[i + 1..], vars, escape);
                match used {
                    0 => out.push('$'),
                    _ => out.push_str(&value),
                }
                i += used;
            }
            _ => out.push(c),
        }
        i += 1;
    }
    out
}

/// A `$NAME` or `${NAME...}` after the `$`: its value and how many chars
/// it took (0: a lone `$`).
fn variable(rest: &[char], vars: &dyn Fn(&str) -> Option<String>, escape: char) -> (String, usize) {
    let is_name = |c: char| c.is_ascii_alphanumeric() || c == '_';
    if rest.first() == Some(&'{') {
        let Some(close) = matching_brace(rest) else {
            return (String::new(), 0);
        };
        let inner: String = rest[1..close].iter().collect();
        let name_len = inner.chars().take_while(|c| is_name(*c)).count();
        let (name, op) = inner.split_at(name_len);
        let value = vars(name);
        let expanded = match op {
            "" => value.unwrap_or_default(),
            _ if op.starts_with(":-") => match value.filter(|v| !v.is_empty()) {
                Some(v) => v,
                None => expand(&op[2..], vars, escape),
            },
            _ if op.starts_with(":+") => match value.filter(|v| !v.is_empty()) {
                Some(_) => expand(&op[2..], vars, escape),
                None => String::new(),
            },
            _ if op.starts_with('-') => value.unwrap_or_else(|| expand(&op[1..], vars, escape)),
            _ if op.starts_with('+') => value
                .map(|_| expand(&op[1..], vars, escape))
                .unwrap_or_default(),
            _ => value.unwrap_or_default(),
        };
        return (expanded, close + 1);
    }
    let len = rest.iter().take_while(|c| is_name(**c)).count();
    if len == 0 {
        return (String::new(), 0);
    }
    let name: String = rest[..len].iter().collect();
    (vars(&name).unwrap_or_default(), len)
}

fn matching_brace(rest: &[char]) -> Option<usize> {
    let mut depth = 0;
    for (i, c) in rest.iter().enumerate() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(k: &str) -> Option<String> {
        match k {
            "A" => Some("1".into()),
            "EMPTY" => Some(String::new()),
            "P" => Some("/opt".into()),
            _ => None,
        }
    }

    #[test]
    fn expansion_follows_docker() {
        let e = |w: &str| expand(w, &vars, '\\');
        assert_eq!(e("$A"), "1");
        assert_eq!(e("${A}x"), "1x");
        assert_eq!(e("${NONE:-d}"), "d");
        assert_eq!(e("${EMPTY:-d}"), "d");
        assert_eq!(e("${A:+set}"), "set");
        assert_eq!(e("${NONE:+set}"), "");
        assert_eq!(e("${NONE:-$P/bin}"), "/opt/bin");
        assert_eq!(e("'$A'"), "$A");
        assert_eq!(e("\"$A b\""), "1 b");
        assert_eq!(e("\\$A"), "$A");
        assert_eq!(e("cost$"), "cost$");
    }

    #[test]
    fn env_label_and_arg_words() {
        let kv = key_values(r#"a=1 b="x y" c=$a"#, true, '\\', 1).unwrap();
        assert_eq!(
            kv,
            vec![
                ("a".into(), "1".into()),
                ("b".into(), "\"x y\"".into()),
                ("c".into(), "$a".into())
            ]
        );
        let legacy = key_values("PATH /usr/bin:/bin", true, '\\', 1).unwrap();
        assert_eq!(legacy, vec![("PATH".into(), "/usr/bin:/bin".into())]);
        assert!(key_values("justakey", false, '\\', 3).is_err());
    }

    #[test]
    fn stages_steps_lines_and_errors() {
        let text = "# syntax=docker/dockerfile:1\nARG BASE=debian\nFROM $BASE AS build\nRUN apt-get update && \\\n    # a comment\n    apt-get install -y hello\nCOPY --chown=1:1 a b /dst/\nFROM scratch\nCOPY --from=build /usr/bin/hello /hello\nCMD [\"/hello\"]\n";
        let d = parse(text).unwrap();
        assert_eq!(d.global_args, vec![("BASE".into(), Some("debian".into()))]);
        assert_eq!(d.stages.len(), 2);
        assert_eq!(d.stages[0].name.as_deref(), Some("build"));
        assert_eq!(d.stages[0].line, 3);
        let run = &d.stages[0].steps[0];
        assert_eq!(run.line, 4);
        match &run.kind {
            Kind::Run(Cmd::Shell(s)) => {
                assert_eq!(s, "apt-get update &&     apt-get install -y hello")
            }
            k => panic!("{k:?}"),
        }
        match &d.stages[1].steps[0].kind {
            Kind::Copy { from, sources, .. } => {
                assert_eq!(from.as_deref(), Some("build"));
                assert_eq!(sources, &vec!["/usr/bin/hello".to_string()]);
            }
            k => panic!("{k:?}"),
        }
        let e = parse("FROM a\nONBUILD RUN x\n").unwrap_err().to_string();
        assert!(e.contains("line 2") && e.contains("ONBUILD"), "{e}");
        let e = parse("RUN x\n").unwrap_err().to_string();
        assert!(e.contains("line 1"), "{e}");
        let e = parse("FROM a\nRUN --mount=type=cache,target=/x true\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 2") && e.contains("--mount"), "{e}");
    }
}
