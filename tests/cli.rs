//! The command line and environment of the real binary: flags, `TIDEWAY_*` variables, `--help`, and
//! the slow-command log.

mod common;

use bson::{doc, Bson};
use common::process::{free_port, tideway, Process};

#[tokio::test]
async fn environment_variables_configure_the_server() {
    let port = free_port();
    let mut command = tideway();
    command
        .env("TIDEWAY_PORT", port.to_string())
        .env("TIDEWAY_STORAGE", "memory")
        .env("TIDEWAY_MAX_CONNS", "77");
    let server = Process::spawn(command, port);
    let admin = server.client().database("admin");
    let opts = admin.run_command(doc! {"getCmdLineOpts": 1}).await.unwrap();
    let parsed = opts.get_document("parsed").unwrap();
    assert_eq!(
        parsed.get_document("net").unwrap().get_i32("port"),
        Ok(i32::from(port))
    );
    assert_eq!(
        parsed
            .get_document("net")
            .unwrap()
            .get_i64("maxIncomingConnections"),
        Ok(77)
    );
    assert_eq!(
        parsed.get_document("storage").unwrap().get_str("engine"),
        Ok("memory")
    );
    server.terminate();
}

#[test]
fn help_lists_every_flag_and_its_variable() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_tideway"))
        .arg("--help")
        .output()
        .unwrap();
    assert!(output.status.success());
    let help = String::from_utf8_lossy(&output.stdout);
    for flag in [
        "--port",
        "--bind_ip",
        "--dbpath",
        "--storage",
        "--syncdelay-ms",
        "--maxConns",
        "--log-format",
        "--log-level",
        "--slowms",
        "--enableTestCommands",
        "--setParameter",
        "TIDEWAY_PORT",
        "TIDEWAY_DBPATH",
    ] {
        assert!(help.contains(flag), "--help mentions {flag}:\n{help}");
    }
}

#[tokio::test]
async fn slow_commands_are_logged() {
    let port = free_port();
    let mut command = tideway();
    command.args([
        "--port",
        &port.to_string(),
        "--storage",
        "memory",
        "--slowms",
        "0",
    ]);
    let server = Process::spawn(command, port);
    let admin = server.client().database("admin");
    admin.run_command(doc! {"ping": 1}).await.unwrap();
    let log = admin.run_command(doc! {"getLog": "global"}).await.unwrap();
    let lines: Vec<&str> = log
        .get_array("log")
        .unwrap()
        .iter()
        .filter_map(Bson::as_str)
        .collect();
    let slow = lines
        .iter()
        .find(|line| line.contains("Slow query") && line.contains("\"ping\""));
    assert!(slow.is_some(), "a slow-query line for ping in {lines:#?}");
    server.terminate();
}
