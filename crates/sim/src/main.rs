//! `tarn-sim`: runs one seed of the simulator and prints the seed first.
//!
//! ```text
//! tarn-sim [--seed N] [--steps N] [--budget within|beyond] [--images DIR] [--quiet]
//!          [--verbose] [--outages] [--snapshots] [--volumes] [--fill]
//!          [--draid | --no-draid]
//! ```
//! Exit status: 0 when every invariant held, 1 on a broken invariant (seed, step and
//! invariant printed, device images written), 2 on a usage error.

use std::path::PathBuf;
use std::process::ExitCode;

use tarn_sim::{Budget, Options, STEPS_DEFAULT};

const USAGE: &str = "usage: tarn-sim [--seed N] [--steps N] [--budget within|beyond] \
                     [--images DIR] [--quiet] [--verbose] [--outages] \
                     [--snapshots] [--volumes] [--fill] [--draid | --no-draid]";

struct Args {
    options: Options,
    quiet: bool,
}

fn number(value: Option<String>, flag: &str) -> Result<u64, String> {
    let value = value.ok_or(format!("{flag} needs a value"))?;
    value
        .parse()
        .map_err(|_| format!("{flag}: '{value}' is not a number"))
}

fn parse(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut seed = None;
    let mut options = Options {
        seed: 0,
        steps: STEPS_DEFAULT,
        budget: None,
        images: None,
        verbose: false,
        outages: false,
        snapshots: false,
        volumes: false,
        fill: false,
        draid: None,
    };
    let mut quiet = false;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--seed" => seed = Some(number(args.next(), "--seed")?),
            "--steps" => options.steps = number(args.next(), "--steps")?,
            "--budget" => {
                options.budget = match args.next().as_deref() {
                    Some("within") => Some(Budget::Within),
                    Some("beyond") => Some(Budget::Beyond),
                    _ => return Err("--budget takes 'within' or 'beyond'".into()),
                }
            }
            "--images" => {
                let dir = args.next().ok_or("--images needs a directory")?;
                options.images = Some(PathBuf::from(dir));
            }
            "--quiet" => quiet = true,
            "--verbose" => options.verbose = true,
            "--outages" => options.outages = true,
            "--fill" => options.fill = true,
            "--snapshots" => options.snapshots = true,
            "--volumes" => options.volumes = true,
            "--draid" => options.draid = Some(true),
            "--no-draid" => options.draid = Some(false),
            "-h" | "--help" => return Err(USAGE.into()),
            other => return Err(format!("unknown argument '{other}'")),
        }
    }
    // No seed given: a random one, printed like any other so the run can be replayed.
    options.seed = seed.unwrap_or_else(|| tarn_base::SeededRng::from_entropy().next_u64());
    Ok(Args { options, quiet })
}

fn main() -> ExitCode {
    let args = match parse(std::env::args().skip(1)) {
        Ok(args) => args,
        Err(message) => {
            eprintln!("tarn-sim: {message}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let options = args.options;
    println!("seed {}", options.seed);
    match tarn_sim::run(&options) {
        Ok(summary) => {
            if !args.quiet {
                println!("config: {}", summary.config);
            }
            if let Some(why) = &summary.ended {
                println!("ended early (allowed beyond budget): {why}");
            }
            let c = summary.counts;
            println!(
                "ok seed {} budget {:?} steps {} txgs {} imports {} crashes {} checks {} \
                 errors-reported {} losses-placed {} faults {} replaces {} spares {} scans {} \
                 l2-hits {} l2-restored {} l2-restored-hits {} suspensions {} clears {} \
                 snapshot-verbs {} enospc {} volume-ops {} volume-flushes {} \
                 volume-replays {} volume-shrinks {} volume-split-flushes {} clones {} \
                 clones-refused {} prewritten {} trace {:016x}",
                summary.seed,
                summary.budget,
                summary.steps,
                c.txgs,
                c.imports,
                c.crashes,
                c.checks,
                c.errors_reported,
                c.losses_placed,
                c.faults_injected,
                c.replaces,
                c.spares,
                c.scans_finished,
                c.l2_hits,
                c.l2_restored,
                c.l2_restored_hits,
                c.suspensions,
                c.clears,
                c.snapshot_ops,
                c.no_space,
                c.volume_ops,
                c.volume_flushes,
                c.volume_replays,
                c.volume_shrinks,
                c.volume_split_flushes,
                c.clones,
                c.clones_refused,
                c.prewritten,
                summary.trace_hash
            );
            ExitCode::SUCCESS
        }
        Err(failure) => {
            println!("{failure}");
            ExitCode::from(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(text: &str) -> Result<Args, String> {
        parse(text.split_whitespace().map(String::from))
    }

    #[test]
    fn parses_every_flag_and_refuses_junk() {
        let parsed = args("--seed 42 --steps 7 --budget beyond --images /tmp/x --quiet").unwrap();
        assert_eq!(parsed.options.seed, 42);
        assert_eq!(parsed.options.steps, 7);
        assert_eq!(parsed.options.budget, Some(Budget::Beyond));
        assert_eq!(parsed.options.images, Some(PathBuf::from("/tmp/x")));
        assert!(parsed.quiet);
        assert!(args("--seed x").is_err());
        assert!(args("--budget sideways").is_err());
        assert!(args("--frobnicate").is_err());
        assert_eq!(args("").unwrap().options.steps, STEPS_DEFAULT);
    }
}
