//! `berth login` and `berth logout`.

use std::io::{BufRead, IsTerminal, Write};
use std::process::ExitCode;

use anyhow::{bail, Result};
use berth_image::auth::{AuthFiles, Credentials};
use berth_image::reference::ImageRef;
use berth_image::registry::Registry;

use super::Context;
use crate::cli::{LoginArgs, LogoutArgs};

fn registry_host(text: &str) -> String {
    let t = text
        .trim_start_matches("https://")
        .trim_start_matches("http://");
    t.split('/').next().unwrap_or(t).to_string()
}

/// `berth login`.
pub fn login(ctx: &Context, args: LoginArgs) -> Result<ExitCode> {
    let host = registry_host(&args.registry);
    let stdin = std::io::stdin();
    let username = match args.username {
        Some(u) => u,
        None if stdin.is_terminal() => {
            eprint!("Username: ");
            std::io::stderr().flush()?;
            let mut line = String::new();
            stdin.lock().read_line(&mut line)?;
            line.trim().to_string()
        }
        None => bail!("no user name: pass --username (standard input is not a terminal)"),
    };
    let password = if args.password_stdin {
        let mut line = String::new();
        stdin.lock().read_line(&mut line)?;
        line.trim_end_matches(['\n', '\r']).to_string()
    } else if stdin.is_terminal() {
        rpassword::prompt_password("Password: ")?
    } else {
        bail!("no password: pass --password-stdin (standard input is not a terminal)");
    };
    if username.is_empty() || password.is_empty() {
        bail!("user name and password must not be empty");
    }
    let creds = Credentials { username, password };
    // Any repository name will do: the registry checks the credentials.
    let probe = ImageRef::parse(&format!("{host}/berth-login-probe/x:latest"))?;
    let config = ctx.config()?;
    let options = berth_image::registry::RegistryOptions {
        insecure: !args.tls.tls_verify || config.is_insecure(&host),
        credentials: Some(creds.clone()),
        ..Default::default()
    };
    Registry::new(&probe, options)?.check_login(&probe)?;
    let path = AuthFiles::from_env().store(&host, &creds)?;
    eprintln!("Login Succeeded (credentials stored in {})", path.display());
    Ok(ExitCode::SUCCESS)
}

/// `berth logout`.
pub fn logout(args: LogoutArgs) -> Result<ExitCode> {
    let host = registry_host(&args.registry);
    if AuthFiles::from_env().remove(&host)? {
        eprintln!("Removed login credentials for {host}");
        Ok(ExitCode::SUCCESS)
    } else {
        bail!("not logged in to {host}")
    }
}
