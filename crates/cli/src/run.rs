//! From parsed arguments to a request (`plan`, pure), through the daemon (`execute`), to the
//! text and exit status of the command (`Outcome`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tarn_proto::{PoolAdd, PoolCreate, PoolImport, ReplyPayload, Request, Response, ScrubAction};

use crate::args::{Cli, Command, PoolCommand};
use crate::render::{self, GetField, ListColumn};
use crate::vdevspec;

/// What the command prints and how it exits (I1 of the crate block).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Outcome {
    pub(crate) stdout: String,
    pub(crate) stderr: String,
    pub(crate) code: i32,
}

impl Outcome {
    pub(crate) fn ok(stdout: String) -> Outcome {
        Outcome {
            stdout,
            stderr: String::new(),
            code: 0,
        }
    }

    /// A refusal: one line on stderr, exit 1.
    pub(crate) fn refused(line: String) -> Outcome {
        assert!(!line.contains('\n'), "I1: a refusal is one line: {line:?}");
        Outcome {
            stdout: String::new(),
            stderr: format!("{line}\n"),
            code: 1,
        }
    }

    /// A usage error found after clap (a bad `-o` column): one line on stderr, exit 2.
    pub(crate) fn usage(line: String) -> Outcome {
        Outcome {
            stdout: String::new(),
            stderr: format!("{line}\n"),
            code: 2,
        }
    }
}

/// How to show a successful reply.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum View {
    Silent,
    Layout {
        name: String,
        /// `add -n` (an existing pool updated) rather than `create -n`.
        update: bool,
    },
    List {
        columns: Vec<ListColumn>,
        scripted: bool,
        parsable: bool,
        all: bool,
    },
    Status {
        verbose: bool,
        explain: bool,
        slow: bool,
        names: Vec<String>,
    },
    Properties {
        fields: Vec<GetField>,
        scripted: bool,
        parsable: bool,
    },
    Importable,
    Txgs,
    History {
        long: bool,
    },
    DatasetList(crate::datasets::ListView),
    /// `destroy DS@SNAP` with `-v` (or `-n`): what went or would go.
    SnapshotDestroy {
        dry_run: bool,
        verbose: bool,
        parsable: bool,
    },
    DatasetGet(crate::datasets::GetView),
    /// `tarn holds`.
    Holds {
        scripted: bool,
        parsable: bool,
    },
    /// `tarn diff`.
    Diff {
        types: bool,
        scripted: bool,
        times: bool,
    },
    /// `tarn nbd`.
    Nbd {
        scripted: bool,
    },
    Userspace(crate::userspace::SpaceView),
    Projects,
    Mounts,
    Events {
        verbose: bool,
        follow: bool,
        clear: bool,
    },
    Iostat(crate::iostat::IostatView),
    /// `send` and `receive`: the stream is the CLI's stdout or stdin; `-v` says what went.
    Stream {
        verbose: bool,
        parsable: bool,
        dry_run: bool,
    },
}

/// A request ready to send, with what the error line names and how to show the reply.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Plan {
    pub(crate) request: Request,
    pub(crate) verb: &'static str,
    pub(crate) object: Option<String>,
    pub(crate) view: View,
}

/// Runs a parsed command line; under `-j` a refusal is a JSON document on stdout (with the
/// same exit status) instead of its line on stderr.
pub(crate) fn run(cli: Cli) -> Outcome {
    let flags = cli.json_int || cli.json_flat_vdevs || cli.json_pool_key_guid;
    if flags && !cli.json {
        return Outcome::usage(
            "'--json-int', '--json-flat-vdevs' and '--json-pool-key-guid' only work with '-j'"
                .to_string(),
        );
    }
    let json = cli.json.then(|| crate::json::JsonOptions {
        command: cli.command_name.clone(),
        int: cli.json_int,
        flat_vdevs: cli.json_flat_vdevs,
        pool_key_guid: cli.json_pool_key_guid,
    });
    let outcome = run_command(cli, json.as_ref());
    match json {
        Some(options) if outcome.code != 0 && outcome.stdout.is_empty() => {
            let document = crate::json::error(&options, &outcome.stderr, outcome.code);
            Outcome {
                stdout: format!("{document:#}\n"),
                stderr: String::new(),
                code: outcome.code,
            }
        }
        _ => outcome,
    }
}

fn run_command(cli: Cli, json_options: Option<&crate::json::JsonOptions>) -> Outcome {
    let rundir = cli.rundir.unwrap_or_else(tarn_daemon::default_rundir);
    let rundir = std::path::absolute(&rundir).unwrap_or(rundir);
    match cli.command {
        Command::Daemon(args) if args.stop => stop_daemon(&rundir),
        Command::Daemon(_) => run_daemon(&rundir),
        Command::Demo(args) => run_demo(&args),
        Command::Memory(args) => crate::memory::run(&args, &rundir, cli.json),
        Command::Checksum(args) => crate::checksum::run(&args, &rundir, json_options),
        Command::Completions { shell } => crate::manual::completions(shell),
        Command::Man { dir } => crate::manual::man_pages(&dir),
        command => {
            let cwd = match std::env::current_dir() {
                Ok(cwd) => cwd,
                Err(error) => {
                    let why = tarn_daemon::describe_io(&error);
                    return Outcome::refused(format!("cannot find the current directory: {why}"));
                }
            };
            let planned = match command {
                Command::Pool(command) => plan(command, &cwd),
                other => crate::datasets::plan(other, &cwd),
            };
            match planned {
                Ok(plan) if matches!(plan.view, View::Events { follow: true, .. }) => {
                    follow_events(plan, &rundir, cli.json)
                }
                Ok(plan) if matches!(plan.view, View::Iostat(_)) => {
                    crate::iostat::run(&plan, &rundir, cli.json)
                }
                Ok(plan) if plan.request.wants_stream() => {
                    execute_stream(plan, &rundir, json_options)
                }
                Ok(plan) => match missing_dir(&plan) {
                    Some(outcome) => outcome,
                    None => execute(plan, &rundir, json_options),
                },
                Err(outcome) => outcome,
            }
        }
    }
}

/// The demo's layout word (`raidz2`, `draid2:8d:2s`, ...) over `devices` files, checked by
/// the `pool create` grammar.
fn demo_layout(word: &str, devices: usize) -> Result<tarn_engine::TopLayout, String> {
    let mut words = vec![word.to_string()];
    words.extend((0..devices).map(|i| format!("/disk{i}")));
    let groups = crate::vdevspec::parse(&words, std::path::Path::new("/"))
        .map_err(|why| format!("invalid --layout: {why}"))?;
    match groups.first().map(|g| g.kind) {
        Some(tarn_proto::VdevKind::Raidz(parity)) if groups.len() == 1 => {
            Ok(tarn_engine::TopLayout::Raidz(parity))
        }
        Some(tarn_proto::VdevKind::Draid {
            parity,
            data,
            spares,
        }) if groups.len() == 1 => Ok(tarn_engine::TopLayout::Draid {
            parity,
            data,
            spares,
        }),
        _ => Err(format!(
            "invalid --layout '{word}' (valid: raidz1-3 or a draid word)"
        )),
    }
}

fn run_demo(args: &crate::args::DemoArgs) -> Outcome {
    let devices = usize::from(args.devices);
    let layout = match demo_layout(&args.layout, devices) {
        Ok(layout) => layout,
        Err(why) => return Outcome::refused(render::error_line("run", Some("demo"), &why)),
    };
    // raidz2 keeps (devices - 2) / devices of the space for data; leave room for metadata.
    let data_share = args.size / (devices as u64 - 2).max(1);
    let options = crate::demo::DemoOptions {
        dir: args.dir.clone(),
        size: args.size,
        devices,
        device_size: args.device_size.unwrap_or((data_share * 2).max(1 << 30)),
        keep: args.keep,
        direct: args.direct,
        layout,
    };
    let status =
        |engine: &tarn_engine::Engine| match tarn_daemon::backend::status_infos(engine, &[]) {
            Ok(pools) => render::status(&pools, false),
            Err(error) => format!("{error}\n"),
        };
    match crate::demo::run(&options, &status) {
        Ok(()) => Outcome::ok(String::new()),
        Err(message) => Outcome::refused(render::error_line("run", Some("demo"), &message)),
    }
}

fn run_daemon(rundir: &Path) -> Outcome {
    let backend = match tarn_daemon::backend::EngineBackend::new(rundir) {
        Ok(backend) => backend,
        Err(message) => return Outcome::refused(format!("cannot start tarn daemon: {message}")),
    };
    match tarn_daemon::serve(rundir, Arc::new(backend)) {
        Ok(()) => Outcome::ok(String::new()),
        Err(error) => Outcome::refused(format!("cannot start tarn daemon: {error}")),
    }
}

fn stop_daemon(rundir: &Path) -> Outcome {
    let mut client = match tarn_daemon::Client::connect(rundir) {
        Ok(client) => client,
        Err(error) => return Outcome::refused(error.to_string()),
    };
    match client.call(&Request::Shutdown, |_| {}) {
        Ok(Response::Ok(_)) => {}
        Ok(Response::Error(error)) => {
            return Outcome::refused(render::error_line("stop tarn daemon", None, &error.message));
        }
        Err(error) => return Outcome::refused(error.to_string()),
    }
    if tarn_daemon::wait_stopped(rundir, tarn_daemon::SHUTDOWN_WAIT_SECS + 10) {
        Outcome::ok(String::new())
    } else {
        Outcome::refused(render::error_line(
            "stop tarn daemon",
            None,
            "it accepted the request but is still running",
        ))
    }
}

/// An import whose `-d` directory is missing or not a directory, refused before the daemon
/// is asked (ZFS says so too, where a silent "no pools available" would mislead). Kept out of
/// `plan`, which does no I/O.
fn missing_dir(plan: &Plan) -> Option<Outcome> {
    let dirs = match &plan.request {
        Request::PoolImport(import) => &import.dirs,
        Request::PoolImportList { dirs } | Request::PoolImportTxgs { dirs, .. } => dirs,
        _ => return None,
    };
    let why = dirs.iter().find_map(|dir| match std::fs::metadata(dir) {
        Ok(meta) if meta.is_dir() => None,
        Ok(_) => Some(format!("'{dir}' is not a directory")),
        Err(e) => Some(format!(
            "directory '{dir}': {}",
            tarn_daemon::describe_io(&e)
        )),
    })?;
    Some(Outcome::refused(render::error_line(
        plan.verb,
        plan.object.as_deref(),
        &why,
    )))
}

fn absolute_dirs(dirs: &[PathBuf], cwd: &Path) -> Result<Vec<String>, String> {
    dirs.iter()
        .map(|dir| {
            let dir = cwd.join(dir);
            dir.to_str()
                .map(str::to_string)
                .ok_or_else(|| format!("directory '{}' is not valid UTF-8", dir.display()))
        })
        .collect()
}

/// The one object a multi-pool command names in its error line, if there is one.
fn single(names: &[String]) -> Option<String> {
    match names {
        [name] => Some(name.clone()),
        _ => None,
    }
}

/// `tarn pool add [-n] [-f] POOL VDEVSPEC...` as a request (the create grammar, any section
/// alone).
fn plan_add(args: crate::args::AddArgs, cwd: &Path) -> Result<Plan, Outcome> {
    let vdevs = vdevspec::parse_add(&args.vdevs, cwd).map_err(|why| {
        let message = format!("invalid vdev specification: {why}");
        Outcome::refused(render::error_line("add", Some(&args.name), &message))
    })?;
    let view = match args.dry_run {
        true => View::Layout {
            name: args.name.clone(),
            update: true,
        },
        false => View::Silent,
    };
    Ok(Plan {
        verb: "add",
        object: Some(args.name.clone()),
        view,
        request: Request::PoolAdd(PoolAdd {
            name: args.name,
            vdevs,
            force: args.force,
            dry_run: args.dry_run,
        }),
    })
}

/// Turns a pool command into a request (pure: no daemon, no I/O besides `cwd`).
pub(crate) fn plan(command: PoolCommand, cwd: &Path) -> Result<Plan, Outcome> {
    let plan = match command {
        PoolCommand::Create(args) => {
            let vdevs = vdevspec::parse(&args.vdevs, cwd).map_err(|why| {
                let message = format!("invalid vdev specification: {why}");
                Outcome::refused(render::error_line("create", Some(&args.name), &message))
            })?;
            let view = match args.dry_run {
                true => View::Layout {
                    name: args.name.clone(),
                    update: false,
                },
                false => View::Silent,
            };
            Plan {
                verb: "create",
                object: Some(args.name.clone()),
                view,
                request: Request::PoolCreate(PoolCreate {
                    name: args.name,
                    vdevs,
                    properties: args.properties,
                    fs_properties: args.fs_properties,
                    mountpoint: args.mountpoint,
                    force: args.force,
                    dry_run: args.dry_run,
                }),
            }
        }
        PoolCommand::Add(args) => plan_add(args, cwd)?,
        PoolCommand::Remove { name, device } => Plan {
            verb: "remove",
            object: Some(device.clone()),
            view: View::Silent,
            request: Request::PoolRemove { name, device },
        },
        PoolCommand::Sync { names } => Plan {
            verb: "sync",
            object: single(&names),
            view: View::Silent,
            request: Request::PoolSync { names },
        },
        PoolCommand::Destroy { force, name } => Plan {
            verb: "destroy",
            object: Some(name.clone()),
            view: View::Silent,
            request: Request::PoolDestroy { name, force },
        },
        PoolCommand::List(args) => {
            let columns = match &args.columns {
                Some(spec) => render::list_columns(spec).map_err(Outcome::usage)?,
                None => render::LIST_DEFAULT.to_vec(),
            };
            let (verb, object) = match single(&args.names) {
                Some(name) => ("open", Some(name)),
                None => ("list pools", None),
            };
            Plan {
                verb,
                object,
                view: View::List {
                    columns,
                    scripted: args.scripted,
                    parsable: args.parsable,
                    all: args.names.is_empty(),
                },
                request: Request::PoolList { names: args.names },
            }
        }
        PoolCommand::Status {
            only_unhealthy,
            verbose,
            slow,
            names,
        } => plan_status(only_unhealthy, verbose, slow, names),
        PoolCommand::Get(args) => {
            let fields = match &args.fields {
                Some(spec) => render::get_fields(spec).map_err(Outcome::usage)?,
                None => render::GET_DEFAULT.to_vec(),
            };
            let properties: Vec<String> = args
                .properties
                .split(',')
                .map(|p| p.trim().to_string())
                .collect();
            let (verb, object) = match single(&args.names) {
                Some(name) => ("get property for", Some(name)),
                None => ("get properties", None),
            };
            Plan {
                verb,
                object,
                view: View::Properties {
                    fields,
                    scripted: args.scripted,
                    parsable: args.parsable,
                },
                request: Request::PoolGet {
                    properties,
                    names: args.names,
                },
            }
        }
        PoolCommand::Set {
            assignment: (property, value),
            name,
        } => Plan {
            verb: "set property for",
            object: Some(name.clone()),
            view: View::Silent,
            request: Request::PoolSet {
                property,
                value,
                name,
            },
        },
        PoolCommand::Export { force, name } => Plan {
            verb: "export",
            object: Some(name.clone()),
            view: View::Silent,
            request: Request::PoolExport { name, force },
        },
        PoolCommand::History {
            internal,
            long,
            names,
        } => {
            let (verb, object) = match single(&names) {
                Some(name) => ("get history for", Some(name)),
                None => ("get history", None),
            };
            Plan {
                verb,
                object,
                view: View::History { long },
                request: Request::PoolHistory {
                    names,
                    long,
                    internal,
                },
            }
        }
        other => plan_maintenance(other, cwd)?,
    };
    Ok(plan)
}

/// Plans `status [-x] [-v] [-s]`.
fn plan_status(only_unhealthy: bool, verbose: bool, slow: bool, names: Vec<String>) -> Plan {
    let (verb, object) = match single(&names) {
        Some(name) => ("open", Some(name)),
        None => ("get pool status", None),
    };
    Plan {
        verb,
        object,
        view: View::Status {
            verbose,
            explain: only_unhealthy,
            slow,
            names: names.clone(),
        },
        request: Request::PoolStatus {
            names,
            verbose,
            only_unhealthy,
        },
    }
}

/// Plans `import`, `scrub`, `clear`, `offline` and `online` (and through `plan_replace`,
/// `replace`, `attach` and `detach`).
fn plan_maintenance(command: PoolCommand, cwd: &Path) -> Result<Plan, Outcome> {
    let plan = match command {
        PoolCommand::Import(args) => plan_import(args, cwd)?,
        PoolCommand::Iostat(args) => crate::iostat::plan(args)?,
        PoolCommand::Scrub {
            stop,
            pause,
            wait,
            names,
        } => {
            let action = match (stop, pause) {
                (true, _) => ScrubAction::Stop,
                (false, true) => ScrubAction::Pause,
                (false, false) => ScrubAction::Start,
            };
            Plan {
                verb: "scrub",
                object: single(&names),
                view: View::Silent,
                request: Request::PoolScrub {
                    names,
                    action,
                    wait,
                },
            }
        }
        PoolCommand::Clear { name, device } => Plan {
            verb: "clear errors for",
            object: Some(name.clone()),
            view: View::Silent,
            request: Request::PoolClear {
                name,
                device: device.map(|d| device_arg(&d, cwd)),
            },
        },
        PoolCommand::Offline {
            temporary,
            name,
            device,
        } => Plan {
            verb: "offline",
            object: Some(device.clone()),
            view: View::Silent,
            request: Request::PoolOffline {
                name,
                device: device_arg(&device, cwd),
                temporary,
            },
        },
        PoolCommand::Online { name, device } => Plan {
            verb: "online",
            object: Some(device.clone()),
            view: View::Silent,
            request: Request::PoolOnline {
                name,
                device: device_arg(&device, cwd),
            },
        },
        other => plan_replace(other, cwd),
    };
    Ok(plan)
}

/// Plans `replace`, `attach` and `detach`.
fn plan_replace(command: PoolCommand, cwd: &Path) -> Plan {
    match command {
        PoolCommand::Replace {
            sequential,
            force,
            wait,
            name,
            old,
            new,
        } => Plan {
            verb: "replace",
            object: Some(old.clone()),
            view: View::Silent,
            request: Request::PoolReplace {
                name,
                old: device_arg(&old, cwd),
                new: new.map(|n| device_arg(&n, cwd)),
                sequential,
                force,
                // On a terminal the admin watches the resilver; scripts get control back.
                wait: wait || std::io::IsTerminal::is_terminal(&std::io::stdout()),
            },
        },
        PoolCommand::Wait { activity, name } => Plan {
            verb: "wait for",
            object: Some(name.clone()),
            view: View::Silent,
            request: Request::PoolWait { name, activity },
        },
        PoolCommand::Attach { name, device, new } => Plan {
            verb: "attach",
            object: Some(new.clone()),
            view: View::Silent,
            request: Request::PoolAttach {
                name,
                device: device_arg(&device, cwd),
                new: device_arg(&new, cwd),
            },
        },
        PoolCommand::Detach { name, device } => Plan {
            verb: "detach",
            object: Some(device.clone()),
            view: View::Silent,
            request: Request::PoolDetach {
                name,
                device: device_arg(&device, cwd),
            },
        },
        PoolCommand::Events {
            verbose,
            follow,
            clear,
            name,
        } => Plan {
            verb: "get events for",
            object: name.clone(),
            view: View::Events {
                verbose,
                follow,
                clear,
            },
            request: Request::PoolEvents {
                name,
                after: 0,
                clear,
            },
        },
        _ => unreachable!("plan_replace is called only for the verbs it lists"),
    }
}

/// A device argument as the daemon matches it: a path (anything with a `/`) made absolute
/// (I2); a bare name or GUID as typed.
fn device_arg(device: &str, cwd: &Path) -> String {
    if device.contains('/') {
        cwd.join(device).display().to_string()
    } else {
        device.to_string()
    }
}

fn plan_import(args: crate::args::ImportArgs, cwd: &Path) -> Result<Plan, Outcome> {
    let object = args.pool.clone();
    let refuse =
        |message: &str| Outcome::refused(render::error_line("import", object.as_deref(), message));
    let dirs = absolute_dirs(&args.dirs, cwd).map_err(|why| refuse(&why))?;
    let mut readonly = false;
    for (property, value) in &args.properties {
        match (property.as_str(), value.as_str()) {
            ("readonly", "on") => readonly = true,
            ("readonly", "off") => readonly = false,
            ("readonly", _) => {
                return Err(refuse(&format!(
                    "'readonly' must be 'on' or 'off', not '{value}'"
                )));
            }
            _ => {
                return Err(refuse(&format!(
                    "property '{property}' cannot be set at import; valid: readonly=on|off"
                )));
            }
        }
    }
    let Some(pool) = args.pool else {
        return Ok(Plan {
            verb: "import",
            object: None,
            view: View::Importable,
            request: Request::PoolImportList { dirs },
        });
    };
    if args.list_txgs {
        return Ok(Plan {
            verb: "list txgs of",
            object: Some(pool.clone()),
            view: View::Txgs,
            request: Request::PoolImportTxgs { dirs, pool },
        });
    }
    if args.dry_run && !(args.rewind || args.extreme || args.txg.is_some()) {
        return Err(refuse("-n is used with -F, -X or -T"));
    }
    Ok(Plan {
        verb: "import",
        object: Some(pool.clone()),
        view: View::Silent,
        request: Request::PoolImport(PoolImport {
            dirs,
            pool,
            new_name: args.new_name,
            force: args.force,
            rewind_txg: args.txg,
            rewind: args.rewind,
            readonly,
            extreme: args.extreme,
            dry_run: args.dry_run,
        }),
    })
}

/// `pool events -f`: prints the events there are, then asks again every second for those
/// numbered above the last one printed, until the daemon goes away or the command is killed.
fn follow_events(mut plan: Plan, rundir: &Path, json: bool) -> Outcome {
    let mut client = match tarn_daemon::Client::connect_or_start(rundir) {
        Ok(client) => client,
        Err(error) => return Outcome::refused(error.to_string()),
    };
    let verbose = matches!(plan.view, View::Events { verbose: true, .. });
    let mut header = !json;
    loop {
        let response = match client.call(&plan.request, |_| {}) {
            Ok(response) => response,
            Err(error) => return Outcome::refused(error.to_string()),
        };
        let Response::Ok(ReplyPayload::Events(rows)) = response else {
            return finish(&plan, response, None);
        };
        let text = if json {
            rows.iter()
                .filter_map(|row| serde_json::to_string(row).ok())
                .map(|line| format!("{line}\n"))
                .collect()
        } else {
            render::events(&rows, verbose, std::mem::take(&mut header))
        };
        if !print_now(&text) {
            return Outcome::ok(String::new());
        }
        if let (Request::PoolEvents { after, clear, .. }, Some(last)) =
            (&mut plan.request, rows.last())
        {
            *after = last.eid;
            *clear = false;
        }
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
}

/// Sends the plan's request and renders the answer.
fn execute(plan: Plan, rundir: &Path, json: Option<&crate::json::JsonOptions>) -> Outcome {
    let mut client = match tarn_daemon::Client::connect_or_start(rundir) {
        Ok(client) => client,
        Err(error) => return Outcome::refused(error.to_string()),
    };
    use std::io::IsTerminal;
    let terminal = std::io::stdout().is_terminal();
    let mut view = crate::progress::ProgressView::new(json.is_some(), terminal);
    let called = client.call(&plan.request, |progress| view.report(&progress));
    view.finish();
    match called {
        Ok(response) => finish(&plan, response, json),
        Err(error) => Outcome::refused(render::error_line(
            plan.verb,
            plan.object.as_deref(),
            &error.to_string(),
        )),
    }
}

/// `send` and `receive`: the daemon gets this process's stdout (send) or stdin (receive)
/// and moves the stream itself; what `-v` or `-j` print goes to stderr for a send (its
/// stdout is the stream).
fn execute_stream(
    mut plan: Plan,
    rundir: &Path,
    json: Option<&crate::json::JsonOptions>,
) -> Outcome {
    use std::io::IsTerminal;
    use std::os::fd::AsFd;
    let sending = matches!(plan.request, Request::Send { .. });
    let View::Stream {
        dry_run,
        verbose,
        parsable,
    } = plan.view
    else {
        return Outcome::refused("a stream command without its view".into());
    };
    let refuse =
        |why: &str| Outcome::refused(render::error_line(plan.verb, plan.object.as_deref(), why));
    if sending && !dry_run && std::io::stdout().is_terminal() {
        return refuse("stream can not be written to a terminal (redirect stdout)");
    }
    if !sending && std::io::stdin().is_terminal() {
        return refuse("stream can not be read from a terminal (redirect stdin)");
    }
    let mut client = match tarn_daemon::Client::connect_or_start(rundir) {
        Ok(client) => client,
        Err(error) => return Outcome::refused(error.to_string()),
    };
    let stdout = std::io::stdout();
    let stdin = std::io::stdin();
    let fd = match sending {
        true => stdout.as_fd(),
        false => stdin.as_fd(),
    };
    let terminal = std::io::stderr().is_terminal();
    let mut shown = crate::progress::StreamProgress::new(verbose, json.is_some(), terminal);
    if let Request::Send { sized, .. } = &mut plan.request {
        // A bar with an ETA needs the total: the daemon sizes the stream first and puts
        // the size in the stream (for the receiver's ETA); `-P`, which prints sizes, too.
        // A plain send to a pipe is not sized: no extra pass over the metadata.
        *sized = shown.wants_total() || parsable;
    }
    let called = client.call_with_stream(&plan.request, Some(fd), |p| shown.report(&p));
    shown.finish();
    match called {
        Ok(response) => {
            let mut outcome = finish(&plan, response, json);
            if sending && outcome.code == 0 {
                outcome.stderr = std::mem::take(&mut outcome.stdout);
            }
            outcome
        }
        Err(error) => refuse(&error.to_string()),
    }
}

/// What `receive -v` prints per snapshot received, dataset or snapshot destroyed (`-R -F`),
/// snapshot renamed (`-R`) and snapshot skipped as already received (`-R`), before its
/// total.
fn received_text(
    out: &mut String,
    dry_run: bool,
    snapshots: &[String],
    (destroyed, renamed, skipped): (&[String], &[(String, String)], &[String]),
) {
    let (receive, destroy, rename) = match dry_run {
        true => ("would receive", "would destroy", "would rename"),
        false => ("received", "destroyed", "renamed"),
    };
    for snapshot in snapshots {
        out.push_str(&format!("{receive} {snapshot}\n"));
    }
    for name in destroyed {
        out.push_str(&format!("{destroy} {name}\n"));
    }
    for (old, new) in renamed {
        out.push_str(&format!("{rename} {old} to {new}\n"));
    }
    for snapshot in skipped {
        out.push_str(&format!("skipped {snapshot}: already received\n"));
    }
}

/// What `send -v` (`-nvP`) and `receive -v` print.
fn stream_text(payload: &ReplyPayload, parsable: bool, dry_run: bool) -> String {
    let size = |bytes: u64| match parsable {
        true => bytes.to_string(),
        false => tarn_base::units::format_size(bytes),
    };
    let estimated = if dry_run { "estimated " } else { "" };
    let mut out = String::new();
    match payload {
        ReplyPayload::Sent {
            streams,
            sizes,
            bytes,
        } => {
            for (index, (from, to)) in streams.iter().enumerate() {
                let bytes = size(sizes.get(index).copied().unwrap_or(0));
                out.push_str(&match (parsable, from.is_empty()) {
                    (true, true) => format!("full\t{to}\t{bytes}\n"),
                    (true, false) => format!("incremental\t{from}\t{to}\t{bytes}\n"),
                    (false, true) => format!("full send of {to} {estimated}size is {bytes}\n"),
                    (false, false) => {
                        format!("send from {from} to {to} {estimated}size is {bytes}\n")
                    }
                });
            }
            out.push_str(&match parsable {
                true => format!("size\t{}\n", size(*bytes)),
                false => format!("total {estimated}size is {}\n", size(*bytes)),
            });
        }
        ReplyPayload::Received {
            snapshots,
            bytes,
            destroyed,
            renamed,
            skipped,
        } => {
            let changes = (destroyed.as_slice(), renamed.as_slice(), skipped.as_slice());
            received_text(&mut out, dry_run, snapshots, changes);
            let verb = if dry_run { "would receive" } else { "received" };
            out.push_str(&format!("{verb} {} stream\n", size(*bytes)));
        }
        ReplyPayload::Corrected {
            snapshot,
            checked,
            healed,
            bytes,
            ..
        } => {
            let (verb, healed_word) = match dry_run {
                true => ("would heal", "would be healed"),
                false => ("healed", "healed"),
            };
            for place in healed {
                out.push_str(&format!("{verb} {snapshot} {place}\n"));
            }
            let run = if dry_run { "dry run of a " } else { "" };
            out.push_str(&format!(
                "{run}corrective receive of {snapshot}: {checked} blocks checked, {} \
                 {healed_word}, {} stream\n",
                healed.len(),
                size(*bytes)
            ));
        }
        _ => {}
    }
    out
}

/// Writes one report of a repeating command (`events -f`, `iostat`, `memory` with an
/// interval) to stdout at once; false when stdout is gone (the reader quit: stop quietly).
pub(crate) fn print_now(text: &str) -> bool {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
        .is_ok()
}

/// Turns the daemon's response into the command's outcome (pure).
pub(crate) fn finish(
    plan: &Plan,
    response: Response,
    json_options: Option<&crate::json::JsonOptions>,
) -> Outcome {
    let json = json_options.is_some();
    let payload = match response {
        Response::Ok(payload) => payload,
        Response::Error(error) => {
            let verb = error.verb.as_deref().unwrap_or(plan.verb);
            let object = error.object.as_deref().or(plan.object.as_deref());
            return Outcome::refused(render::error_line(verb, object, &error.message));
        }
    };
    if let ReplyPayload::Notice(lines) = &payload
        && !json
    {
        return mount_notices(plan, lines);
    }
    // An import that rewound or previewed says what it opened (and any dataset it could
    // not mount), whatever the plan's view.
    if let ReplyPayload::Imported(info) = &payload
        && !json
    {
        let mut outcome = Outcome::ok(render::imported(info));
        if !info.notices.is_empty() {
            outcome.stderr = render::notice(&info.notices);
            outcome.code = 1;
        }
        return outcome;
    }
    if let ReplyPayload::Corrected { unhealed, .. } = &payload
        && !json
        && !unhealed.is_empty()
    {
        return not_healed(plan, &payload, unhealed);
    }
    if let Some(options) = json_options {
        // Notices (a dataset not mounted) are part of the JSON and still exit 1.
        let code = i32::from(match &payload {
            ReplyPayload::Notice(_) => true,
            ReplyPayload::Imported(info) => !info.notices.is_empty(),
            _ => false,
        });
        let document = crate::json::reply(options, &plan.view, &payload);
        return Outcome {
            code,
            ..Outcome::ok(format!("{document:#}\n"))
        };
    }
    match show(&plan.view, &payload) {
        Some(outcome) => outcome,
        None => Outcome::refused(render::error_line(
            plan.verb,
            plan.object.as_deref(),
            "unexpected reply from the daemon (is it another version?)",
        )),
    }
}

/// `receive -c` healed what it could, but the stream did not heal every damaged block: what
/// was healed (`-v`) on stdout, one refusal line naming the rest, exit 1.
fn not_healed(plan: &Plan, payload: &ReplyPayload, unhealed: &[String]) -> Outcome {
    let mut outcome = show(&plan.view, payload).unwrap_or_else(|| Outcome::ok(String::new()));
    let plural = if unhealed.len() == 1 { "" } else { "s" };
    let dry_run = matches!(plan.view, View::Stream { dry_run: true, .. });
    let why = format!(
        "{} damaged block{plural} {}: {}",
        unhealed.len(),
        if dry_run {
            "would not be healed"
        } else {
            "not healed"
        },
        unhealed.join("; ")
    );
    let line = render::error_line(plan.verb, plan.object.as_deref(), &why);
    outcome.stderr = format!("{line}\n");
    outcome.code = 1;
    outcome
}

/// The command did its work but a dataset could not be mounted: ZFS prints why on stderr,
/// says so after `create`, and exits 1 so that scripts notice.
fn mount_notices(plan: &Plan, lines: &[String]) -> Outcome {
    let mut stderr = render::notice(lines);
    if matches!(plan.request, Request::DatasetCreate { .. }) {
        stderr.push_str("filesystem successfully created, but not mounted\n");
    }
    Outcome {
        stdout: String::new(),
        stderr,
        code: 1,
    }
}

fn show(view: &View, payload: &ReplyPayload) -> Option<Outcome> {
    let text = match (view, payload) {
        (View::Silent, ReplyPayload::Unit) => String::new(),
        (View::Layout { name, update }, ReplyPayload::Layout(l)) => {
            render::layout(name, *update, l)
        }
        (
            View::List {
                scripted: false,
                all: true,
                ..
            },
            ReplyPayload::PoolList(rows),
        ) if rows.is_empty() => "no pools available\n".to_string(),
        (
            View::List {
                columns,
                scripted,
                parsable,
                ..
            },
            ReplyPayload::PoolList(rows),
        ) => render::pool_list(rows, columns, *scripted, *parsable),
        (
            View::Status {
                explain: false,
                names,
                ..
            },
            ReplyPayload::PoolStatus(pools),
        ) if pools.is_empty() && names.is_empty() => {
            return Some(Outcome {
                stdout: String::new(),
                stderr: "no pools available\n".to_string(),
                code: 0,
            });
        }
        (
            View::Status {
                verbose,
                explain: true,
                slow,
                names,
            },
            ReplyPayload::PoolStatus(pools),
        ) => render::status_explain(pools, names, *verbose, *slow),
        (View::Status { verbose, slow, .. }, ReplyPayload::PoolStatus(pools)) => {
            render::status_with(pools, *verbose, *slow)
        }
        (
            View::Properties {
                fields,
                scripted,
                parsable,
            },
            ReplyPayload::Properties(rows),
        ) => render::properties(rows, fields, *scripted, *parsable),
        (View::Importable, ReplyPayload::Importable(pools)) if pools.is_empty() => {
            return Some(Outcome {
                stdout: String::new(),
                stderr: "no pools available to import\n".to_string(),
                code: 0,
            });
        }
        (View::Importable, ReplyPayload::Importable(pools)) => render::importable(pools),
        (View::Txgs, ReplyPayload::Txgs(rows)) => render::txgs(rows, false),
        (View::History { long }, ReplyPayload::History(pools)) => render::history(pools, *long),
        _ => show_more(view, payload)?,
    };
    Some(Outcome::ok(text))
}

/// The event views of [`show`], then the dataset and mount views.
fn show_more(view: &View, payload: &ReplyPayload) -> Option<String> {
    let text = match (view, payload) {
        (View::Events { clear: true, .. }, ReplyPayload::Events(_)) => String::new(),
        (
            View::Stream {
                verbose,
                parsable,
                dry_run,
            },
            ReplyPayload::Sent { .. }
            | ReplyPayload::Received { .. }
            | ReplyPayload::Corrected { .. },
        ) => match verbose {
            true => stream_text(payload, *parsable, *dry_run),
            false => String::new(),
        },
        (View::Events { verbose, .. }, ReplyPayload::Events(rows)) => {
            render::events(rows, *verbose, true)
        }
        _ => return crate::datasets::show(view, payload),
    };
    Some(text)
}

#[cfg(test)]
mod tests;
