//! Command-line flags of the hand-written bench targets.

use std::time::Duration;

/// What `cargo bench --bench X -- [flags]` asked for.
#[derive(Clone, Debug)]
pub struct Args {
    /// Smaller counts: `--quick`, or `DRAIN_BENCH_QUICK` set (not to `0`), or
    /// run without `--bench` (as `cargo test --benches` does, for a smoke test).
    pub quick: bool,
    /// Round-trip time the latency proxy adds: `--rtt MS`. Default 20 ms.
    pub rtt: Duration,
    /// Whether `--rtt` was given (benches that sweep round-trip times then
    /// run that one only).
    pub rtt_given: bool,
    /// Bandwidth of the proxy's shared link in Mbit/s: `--bandwidth MBIT`.
    /// Only benches that use a shared link read it; `None` when not given.
    pub bandwidth_mbit: Option<u64>,
    /// Runs per measurement; tables show the median: `--repeat K`. Each
    /// bench has its own default (see [`Args::repeat`]).
    repeat: Option<usize>,
    /// Positional arguments (not flags): benches with named cells run only
    /// the cells whose label contains one of them.
    filters: Vec<String>,
}

/// Whether `DRAIN_BENCH_QUICK` asks for quick mode.
pub fn quick_from_env() -> bool {
    std::env::var("DRAIN_BENCH_QUICK").is_ok_and(|v| !v.is_empty() && v != "0")
}

impl Args {
    /// Parses the process arguments. Unknown arguments (cargo passes
    /// `--bench`, and maybe a filter) are ignored.
    pub fn parse() -> Args {
        let mut args = Args {
            quick: quick_from_env(),
            rtt: Duration::from_millis(20),
            rtt_given: false,
            bandwidth_mbit: None,
            repeat: None,
            filters: Vec::new(),
        };
        let mut bench_mode = false;
        let mut it = std::env::args().skip(1);
        while let Some(arg) = it.next() {
            let (flag, inline) = match arg.split_once('=') {
                Some((f, v)) => (f.to_string(), Some(v.to_string())),
                None => (arg.clone(), None),
            };
            let mut value = |name: &str| -> u64 {
                let v = inline.clone().or_else(|| it.next());
                v.and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("{name} needs a whole number"))
            };
            match flag.as_str() {
                "--bench" => bench_mode = true,
                "--quick" => args.quick = true,
                "--rtt" => {
                    args.rtt = Duration::from_millis(value("--rtt MS"));
                    args.rtt_given = true;
                }
                "--bandwidth" => args.bandwidth_mbit = Some(value("--bandwidth MBIT").max(1)),
                "--repeat" => args.repeat = Some(value("--repeat K").max(1) as usize),
                _ if !flag.starts_with('-') => args.filters.push(arg.clone()),
                _ => eprintln!("ignoring argument {arg:?}"),
            }
        }
        if !bench_mode {
            args.quick = true;
        }
        args
    }

    /// Whether a cell labelled `label` is to run: no filter given, or one
    /// of them is part of the label.
    pub fn selects(&self, label: &str) -> bool {
        self.filters.is_empty() || self.filters.iter().any(|f| label.contains(f.as_str()))
    }

    /// `full`, or `quick` in quick mode.
    pub fn count(&self, full: usize, quick: usize) -> usize {
        if self.quick { quick } else { full }
    }

    /// Runs per measurement: `--repeat K`, or `default` (1 in quick mode).
    pub fn repeat(&self, default: usize) -> usize {
        self.repeat.unwrap_or(if self.quick { 1 } else { default })
    }

    /// One line saying how this run was configured.
    pub fn describe(&self, repeat: usize) -> String {
        format!("mode: {}, runs per cell: {repeat} (median shown)", if self.quick { "quick" } else { "full" },)
    }
}
