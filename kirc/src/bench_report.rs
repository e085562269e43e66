//! What `kirc bench` reports (kirc/src/bench.rs times the runs): the figures of one benchmark
//! and their two forms, the text of `--message-format human` ([`Report::human`]) and the JSON
//! object of `--message-format json` ([`Report::json`], its schema in docs/cli.md).

use std::collections::BTreeMap;

/// What one run does, for the throughput line.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
#[derive(Clone, Debug, PartialEq)]
pub enum Work {
    /// FLOPs of one run, and the formula they came from (reported as TFLOP/s).
    Flops(f64, String),
    /// Bytes moved by one run, and how they were counted (reported as TB/s).
    Bytes(f64, String),
}

/// Timings of the first launch, in milliseconds: compile, load, bind, run, and their total.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub struct FirstLaunch {
    pub total_ms: f64,
    pub compile_ms: f64,
    /// `hit`, `compiled` (and now cached) or `off` (the cache is off).
    pub cache: &'static str,
    pub load_ms: f64,
    /// Where the loaded image came from (device::load).
    pub image: &'static str,
    pub bind_ms: f64,
    pub run_ms: f64,
}

/// What `kirc bench` reports.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub struct Report {
    /// The source's name (`gemm.kir` for a built-in op).
    pub module: String,
    pub dims: BTreeMap<String, i64>,
    pub gpu: String,
    pub median_ms: f64,
    pub min_ms: f64,
    pub max_ms: f64,
    pub iters: usize,
    pub warmup: usize,
    pub work: Work,
    pub first: FirstLaunch,
    /// The tuned configuration from the cache that applied (`NAME=VALUE`), if any.
    pub tuned: Vec<(String, String)>,
}

#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
impl Report {
    /// TFLOP/s or TB/s of the median run.
    fn rate(&self) -> f64 {
        match &self.work {
            Work::Flops(n, _) | Work::Bytes(n, _) => n / self.median_ms / 1e9,
        }
    }

    /// The report as text: the module, dims and GPU; the median, minimum and maximum; the rate;
    /// the first launch; the tuned configuration.
    pub fn human(&self) -> String {
        let dims: Vec<String> = self.dims.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let rate = match &self.work {
            Work::Flops(n, how) => format!("  {:.1} TFLOP/s ({n:.4e} FLOP: {how})", self.rate()),
            Work::Bytes(n, how) => format!("  {:.3} TB/s ({n:.4e} bytes: {how})", self.rate()),
        };
        let f = &self.first;
        let cache = match f.cache {
            "hit" => "kir cache hit",
            "compiled" => "compiled, now cached",
            _ => "compiled; kir cache off",
        };
        let mut text = format!(
            "{} [{}] on {}\n  {:.4} ms median of {} runs (min {:.4}, max {:.4}; {} warm-up)\n{rate}\n",
            self.module,
            dims.join(", "),
            self.gpu,
            self.median_ms,
            self.iters,
            self.min_ms,
            self.max_ms,
            self.warmup
        );
        text += &format!(
            "  first launch {:.1} ms: compile {:.1} ms ({cache}), load {:.1} ms ({}), bind {:.1} \
             ms, first run {:.1} ms\n",
            f.total_ms, f.compile_ms, f.load_ms, f.image, f.bind_ms, f.run_ms,
        );
        if !self.tuned.is_empty() {
            let set: Vec<String> = self.tuned.iter().map(|(n, v)| format!("{n}={v}")).collect();
            text += &format!("  tuned configuration (kir cache): {}\n", set.join(" "));
        }
        text
    }

    /// The report as one JSON object (docs/cli.md, "kirc bench").
    pub fn json(&self) -> serde_json::Value {
        let (unit, amount, how, rate_unit) = match &self.work {
            Work::Flops(n, how) => ("flop", n, how, "TFLOP/s"),
            Work::Bytes(n, how) => ("byte", n, how, "TB/s"),
        };
        let f = &self.first;
        let tuned: serde_json::Map<String, serde_json::Value> = self
            .tuned
            .iter()
            .map(|(n, v)| (n.clone(), v.clone().into()))
            .collect();
        serde_json::json!({
            "type": "bench",
            "module": self.module,
            "dims": self.dims,
            "gpu": self.gpu,
            "median_ms": self.median_ms,
            "min_ms": self.min_ms,
            "max_ms": self.max_ms,
            "iters": self.iters,
            "warmup": self.warmup,
            "work": {"unit": unit, "amount": amount, "formula": how},
            "rate": {"value": self.rate(), "unit": rate_unit},
            "first_launch": {
                "total_ms": f.total_ms,
                "compile_ms": f.compile_ms,
                "cache": f.cache,
                "load_ms": f.load_ms,
                "image": f.image,
                "bind_ms": f.bind_ms,
                "run_ms": f.run_ms,
            },
            "tuned": (!tuned.is_empty()).then_some(tuned),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{FirstLaunch, Report, Work};

    fn report(work: Work, tuned: Vec<(String, String)>) -> Report {
        Report {
            module: "gemm.kir".into(),
            dims: [("M".to_string(), 4096), ("N".to_string(), 1000)]
                .into_iter()
                .collect(),
            gpu: "Some GPU".into(),
            median_ms: 1.25,
            min_ms: 1.0,
            max_ms: 2.5,
            iters: 100,
            warmup: 10,
            work,
            first: FirstLaunch {
                total_ms: 30.0,
                compile_ms: 20.0,
                cache: "hit",
                load_ms: 5.0,
                image: "cubin from the kir cache",
                bind_ms: 2.0,
                run_ms: 3.0,
            },
            tuned,
        }
    }

    #[test]
    fn the_report_as_text() {
        let r = report(
            Work::Flops(5e12, "2*M*N".into()),
            vec![("BLOCK_M".into(), "128".into())],
        );
        assert_eq!(
            r.human(),
            "gemm.kir [M=4096, N=1000] on Some GPU\n  1.2500 ms median of 100 runs (min 1.0000, \
             max 2.5000; 10 warm-up)\n  4000.0 TFLOP/s (5.0000e12 FLOP: 2*M*N)\n  first launch \
             30.0 ms: compile 20.0 ms (kir cache hit), load 5.0 ms (cubin from the kir cache), \
             bind 2.0 ms, first run 3.0 ms\n  tuned configuration (kir cache): BLOCK_M=128\n"
        );
    }

    #[test]
    fn the_report_as_json() {
        let r = report(Work::Bytes(3e9, "io".into()), vec![]);
        let v: serde_json::Value = serde_json::from_str(&r.json().to_string()).unwrap();
        assert_eq!(v["type"], "bench");
        assert_eq!(v["module"], "gemm.kir");
        assert_eq!(v["dims"]["M"], 4096);
        assert_eq!(v["dims"]["N"], 1000);
        assert_eq!(v["median_ms"], 1.25);
        assert_eq!(
            (v["min_ms"].as_f64(), v["max_ms"].as_f64()),
            (Some(1.0), Some(2.5))
        );
        assert_eq!(
            (v["iters"].as_u64(), v["warmup"].as_u64()),
            (Some(100), Some(10))
        );
        assert_eq!(v["work"]["unit"], "byte");
        assert_eq!(v["work"]["amount"], 3e9);
        assert_eq!(v["rate"]["unit"], "TB/s");
        // 3e9 bytes in 1.25 ms: 2.4e12 B/s.
        assert!((v["rate"]["value"].as_f64().unwrap() - 2.4).abs() < 1e-12);
        assert_eq!(v["first_launch"]["cache"], "hit");
        assert_eq!(v["first_launch"]["compile_ms"], 20.0);
        assert!(v["tuned"].is_null());
        let t = report(Work::Flops(1.0, "f".into()), vec![("W".into(), "4".into())]).json();
        assert_eq!(t["tuned"]["W"], "4");
        assert_eq!(t["rate"]["unit"], "TFLOP/s");
    }
}
