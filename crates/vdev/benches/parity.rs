//! Raidz parity benchmarks in the shape of OpenZFS's `raidz_test -B`: 8 data columns of
//! 16 KiB (a 128 KiB block), generation for raidz1/2/3 and reconstruction of 1/2/3 data
//! columns, for every implementation this machine has. Throughput is bytes of data per
//! second; a summary in GB/s (10^9) is printed at the end.

use criterion::{Criterion, Throughput, black_box};
use std::time::{Duration, Instant};
use tarn_vdev::raidz_math::{Impl, generate, reconstruct};

const DATA_COLUMNS: usize = 8;
const COLUMN_BYTES: usize = 16 << 10;
const BLOCK_BYTES: usize = DATA_COLUMNS * COLUMN_BYTES;

fn block() -> Vec<Vec<u8>> {
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    (0..DATA_COLUMNS)
        .map(|_| {
            (0..COLUMN_BYTES)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    state as u8
                })
                .collect()
        })
        .collect()
}

fn run_generate(imp: Impl, parity: usize, data: &[Vec<u8>], out: &mut [Vec<u8>]) {
    let refs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
    let mut outs: Vec<&mut [u8]> = out.iter_mut().take(parity).map(Vec::as_mut_slice).collect();
    generate(imp, parity, &refs, &mut outs);
}

/// All columns (parity first) of a raidz-`parity` block.
fn columns(imp: Impl, parity: usize) -> Vec<Vec<u8>> {
    let data = block();
    let mut out = vec![vec![0u8; COLUMN_BYTES]; parity];
    run_generate(imp, parity, &data, &mut out);
    out.extend(data);
    out
}

fn run_reconstruct(imp: Impl, parity: usize, columns: &mut [Vec<u8>]) {
    let missing: Vec<usize> = (parity..parity * 2).collect();
    let mut refs: Vec<&mut [u8]> = columns.iter_mut().map(Vec::as_mut_slice).collect();
    reconstruct(imp, parity, &mut refs, &missing);
}

/// Seconds per call of `f` for the summary: the best batch of 20 calls over about half a
/// second. The minimum, unlike the mean, ignores time stolen by other processes on a shared
/// machine.
#[allow(clippy::disallowed_methods)] // A benchmark measures real time by definition.
fn time(mut f: impl FnMut()) -> f64 {
    const BATCH: u32 = 20;
    let start = Instant::now();
    let mut best = f64::MAX;
    while start.elapsed() < Duration::from_millis(500) {
        let batch = Instant::now();
        for _ in 0..BATCH {
            f();
        }
        best = best.min(batch.elapsed().as_secs_f64() / f64::from(BATCH));
    }
    best
}

fn main() {
    let mut criterion = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .configure_from_args();
    let data = block();
    let mut summary = Vec::new();
    for imp in Impl::available() {
        let mut group = criterion.benchmark_group(format!("parity-{}", imp.name()));
        group.throughput(Throughput::Bytes(BLOCK_BYTES as u64));
        for parity in 1..=3usize {
            let mut out = vec![vec![0u8; COLUMN_BYTES]; parity];
            group.bench_function(format!("generate-raidz{parity}"), |b| {
                b.iter(|| run_generate(imp, parity, black_box(&data), &mut out));
            });
            let secs = time(|| run_generate(imp, parity, black_box(&data), &mut out));
            let name = format!("{:6} generate    raidz{parity}", imp.name());
            summary.push((name, BLOCK_BYTES as f64 / secs / 1e9));
        }
        for parity in 1..=3usize {
            let mut cols = columns(imp, parity);
            group.bench_function(format!("reconstruct-{parity}-data"), |b| {
                b.iter(|| run_reconstruct(imp, parity, black_box(&mut cols)));
            });
            let secs = time(|| run_reconstruct(imp, parity, black_box(&mut cols)));
            let name = format!("{:6} reconstruct {parity} data column(s)", imp.name());
            summary.push((name, BLOCK_BYTES as f64 / secs / 1e9));
            assert!(cols == columns(imp, parity), "reconstruction is exact");
        }
        group.finish();
    }
    criterion.final_summary();
    println!("\nsummary: GB/s of data, 8 data columns x 16 KiB");
    for (name, gbps) in summary {
        println!("  {name:40} {gbps:>7.2} GB/s");
    }
}
