//! `berth environments`: the environment definition files found by name.

use std::process::ExitCode;
use std::time::Instant;

use anyhow::Result;
use berth_engine::environment::{self, SearchPath};
use berth_engine::Caller;

use super::Context;
use crate::cli::EnvironmentsArgs;

/// `berth environments`: every `NAME.toml` of the search path, the image
/// it runs (its bases applied) or why it cannot be read.
pub fn list(ctx: &Context, args: EnvironmentsArgs) -> Result<ExitCode> {
    let config = ctx.config()?;
    let caller = Caller::current(Instant::now())?;
    let search = environment::search_path(&config, &caller);
    let var = |k: &str| caller.var(k).map(str::to_string);
    if let Some(name) = &args.resolve {
        let env = environment::load(name, &search, &var)?;
        let out = serde_json::json!({
            "path": env.files.last(),
            "files": env.files,
            "image": env.image,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(ExitCode::SUCCESS);
    }
    let rows: Vec<serde_json::Value> = search
        .list()
        .into_iter()
        .map(|l| {
            let path = l.path.display().to_string();
            let (image, error) = match environment::load(&path, &SearchPath::clone(&search), &var) {
                Ok(env) => (env.image, None),
                Err(e) => (None, Some(e.to_string())),
            };
            serde_json::json!({
                "name": l.name,
                "path": path,
                "shadowed": l.shadowed,
                "image": image,
                "error": error,
            })
        })
        .collect();
    if args.format == "json" {
        let out = serde_json::json!({
            "search_path": search.dirs,
            "environments": rows,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(ExitCode::SUCCESS);
    }
    let dirs: Vec<String> = search
        .dirs
        .iter()
        .map(|d| d.display().to_string())
        .collect();
    if rows.is_empty() {
        println!("no environment files in {}", dirs.join(", "));
        return Ok(ExitCode::SUCCESS);
    }
    println!("{:<20} {:<40} FILE", "NAME", "IMAGE");
    for r in &rows {
        let s = |k: &str| r[k].as_str().unwrap_or("").to_string();
        let image = match (r["image"].as_str(), r["error"].as_str()) {
            (_, Some(_)) => "(error, below)".to_string(),
            (Some(i), None) => i.to_string(),
            (None, None) => "(no image)".to_string(),
        };
        let shadowed = if r["shadowed"].as_bool() == Some(true) {
            " (shadowed by an earlier one)"
        } else {
            ""
        };
        println!("{:<20} {:<40} {}{shadowed}", s("name"), image, s("path"));
        if let Some(e) = r["error"].as_str() {
            println!("  error: {e}");
        }
    }
    println!("search path: {}", dirs.join(":"));
    Ok(ExitCode::SUCCESS)
}
