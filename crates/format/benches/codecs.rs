//! Codec micro-benchmarks on 128 KiB blocks (the default record size): a memcpy baseline,
//! every Fletcher-4 implementation, sha256, blake3, and lz4/zstd on text-like and random data.
//! Throughput is set in bytes so criterion prints GB/s. Run with
//! `cargo bench -p tarn-format --bench codecs`.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use std::hint::black_box;
use std::time::Duration;
use tarn_base::SeededRng;
use tarn_format::checksum::{ChecksumKind, Fletcher4Impl, checksum, fletcher4_with};
use tarn_format::compress::{CompressKind, CompressSetting, compress, decompress};

const BLOCK: usize = 128 << 10;

fn random_block() -> Vec<u8> {
    let mut data = vec![0u8; BLOCK];
    SeededRng::new(1).fill(&mut data);
    data
}

/// Text-like data: words from a small vocabulary in random order, so it compresses about as
/// well as logs or source code (lz4 roughly 2:1), not as trivially as a repeated pattern.
fn text_block() -> Vec<u8> {
    const WORDS: &[&str] = &[
        "the",
        "pool",
        "block",
        "checksum",
        "vdev",
        "mirror",
        "raidz",
        "scrub",
        "txg",
        "sync",
        "uberblock",
        "label",
        "error",
        "device",
        "read",
        "write",
        "of",
        "and",
        "to",
        "in",
        "is",
        "2024-05-01",
        "INFO",
        "WARN",
        "resilver",
        "completed",
        "bytes",
        "with",
        "0",
        "errors",
    ];
    let mut rng = SeededRng::new(2);
    let mut out = Vec::with_capacity(BLOCK + 32);
    while out.len() < BLOCK {
        let index = rng.below(WORDS.len() as u64) as usize;
        out.extend_from_slice(WORDS.get(index).copied().unwrap_or("x").as_bytes());
        out.push(if rng.chance(1, 12) { b'\n' } else { b' ' });
    }
    out.truncate(BLOCK);
    out
}

fn bench_baseline(c: &mut Criterion) {
    let source = random_block();
    let mut target = vec![0u8; BLOCK];
    let mut group = c.benchmark_group("baseline");
    group.throughput(Throughput::Bytes(BLOCK as u64));
    group.bench_function("memcpy", |b| {
        b.iter(|| {
            target.copy_from_slice(black_box(&source));
            black_box(&target);
        });
    });
    group.finish();
}

fn bench_checksums(c: &mut Criterion) {
    let data = random_block();
    let mut group = c.benchmark_group("checksum");
    group.throughput(Throughput::Bytes(BLOCK as u64));
    for implementation in Fletcher4Impl::ALL {
        if !implementation.is_available() {
            continue;
        }
        let name = format!("fletcher4-{}", implementation.name());
        group.bench_function(name, |b| {
            b.iter(|| fletcher4_with(implementation, black_box(&data)));
        });
    }
    group.bench_function("sha256", |b| {
        b.iter(|| checksum(ChecksumKind::Sha256, black_box(&data)))
    });
    group.bench_function("blake3", |b| {
        b.iter(|| checksum(ChecksumKind::Blake3, black_box(&data)))
    });
    group.finish();
}

fn bench_compression(c: &mut Criterion) {
    let text = text_block();
    let random = random_block();
    let mut group = c.benchmark_group("compress");
    group.throughput(Throughput::Bytes(BLOCK as u64));
    group.bench_function("lz4-text", |b| {
        b.iter(|| compress(CompressSetting::Lz4, black_box(&text)))
    });
    group.bench_function("lz4-random", |b| {
        b.iter(|| compress(CompressSetting::Lz4, black_box(&random)));
    });
    // The same random block through lz4 without the early give-up, for comparison.
    let mut scratch = vec![0u8; lz4_flex::block::get_maximum_output_size(BLOCK)];
    group.bench_function("lz4-random-full-attempt", |b| {
        b.iter(|| lz4_flex::block::compress_into(black_box(&random), &mut scratch));
    });
    group.bench_function("zstd3-text", |b| {
        b.iter(|| compress(CompressSetting::Zstd(3), black_box(&text)));
    });
    group.bench_function("zstd3-random", |b| {
        b.iter(|| compress(CompressSetting::Zstd(3), black_box(&random)));
    });
    let lz4 = compress(CompressSetting::Lz4, &text).expect("text-like data compresses with lz4");
    group.bench_function("lz4-decompress-text", |b| {
        b.iter(|| decompress(CompressKind::Lz4, black_box(&lz4), BLOCK));
    });
    let zstd = compress(CompressSetting::Zstd(3), &text).expect("text-like data compresses");
    group.bench_function("zstd-decompress-text", |b| {
        b.iter(|| decompress(CompressKind::Zstd, black_box(&zstd), BLOCK));
    });
    group.finish();
    println!(
        "compressed sizes of the {BLOCK}-byte text block: lz4 {} bytes, zstd-3 {} bytes",
        lz4.len(),
        zstd.len()
    );
}

fn config() -> Criterion {
    // Short runs: the build machine is shared, and 128 KiB iterations settle quickly.
    Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(30)
}

criterion_group! {
    name = codecs;
    config = config();
    targets = bench_baseline, bench_checksums, bench_compression
}
criterion_main!(codecs);
