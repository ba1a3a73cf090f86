//! Tests of the parity math: against a byte-at-a-time reference, and the exhaustive sweep of
//! every raidz geometry and failure set (OpenZFS `raidz_test` style) on every implementation.

use super::*;
use crate::raidz_map::RaidzMap;
use tarn_base::SeededRng;

/// Byte-at-a-time parity straight from the definition `sum coef(row, i) * D_i`.
fn reference_parity(parity: usize, data: &[&[u8]]) -> Vec<Vec<u8>> {
    let len = data.iter().map(|c| c.len()).max().unwrap_or(0);
    (0..parity)
        .map(|row| {
            (0..len)
                .map(|at| {
                    data.iter().enumerate().fold(0u8, |acc, (i, column)| {
                        let byte = column.get(at).copied().unwrap_or(0);
                        acc ^ gf::mul(gf::coefficient(row, i, data.len()), byte)
                    })
                })
                .collect()
        })
        .collect()
}

fn random_columns(rng: &mut SeededRng, lens: &[usize]) -> Vec<Vec<u8>> {
    lens.iter()
        .map(|&len| {
            let mut column = vec![0u8; len];
            rng.fill(&mut column);
            column
        })
        .collect()
}

fn generate_vec(imp: Impl, parity: usize, data: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let len = data.iter().map(Vec::len).max().unwrap_or(0);
    let mut out = vec![vec![0u8; len]; parity];
    let refs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
    let mut outs: Vec<&mut [u8]> = out.iter_mut().map(Vec::as_mut_slice).collect();
    generate(imp, parity, &refs, &mut outs);
    out
}

/// Goal: generation implements the documented formula, including columns of unequal length
/// and lengths that are not a multiple of the chunk size. Method: compare with the reference.
#[test]
fn generation_matches_reference() {
    let mut rng = SeededRng::new(1);
    let shapes: &[&[usize]] = &[
        &[1],
        &[64, 64],
        &[200, 199, 7, 0],
        &[512, 512, 512, 512, 512, 512, 512, 512],
        &[1024, 1024, 512, 512, 512],
        &[130, 129, 128, 127, 65, 64, 63, 1, 300],
    ];
    for imp in Impl::available() {
        for parity in 1..=3 {
            for shape in shapes {
                let data = random_columns(&mut rng, shape);
                let refs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
                let expected = reference_parity(parity, &refs);
                assert_eq!(
                    generate_vec(imp, parity, &data),
                    expected,
                    "{imp:?} p{parity}"
                );
            }
        }
    }
}

/// Goal: Q is Horner's rule as OpenZFS computes it. Method: two columns, Q = 2*D0 ^ D1.
#[test]
fn q_is_horner_over_columns() {
    let data = vec![vec![0x80u8; 64], vec![0x01u8; 64]];
    let parity = generate_vec(Impl::Scalar, 3, &data);
    assert_eq!(parity[0], vec![0x81; 64]);
    assert_eq!(parity[1], vec![0x1d ^ 0x01; 64]);
    assert_eq!(parity[2], vec![gf::mul(4, 0x80) ^ 0x01; 64]);
}

/// Data-sector counts worth testing for a geometry: one sector, a short row, a full row,
/// a row and a bit, several rows with a ragged end.
fn sector_counts(children: usize, parity: usize) -> Vec<u64> {
    let width = (children - parity) as u64;
    let mut counts = vec![
        1,
        width.saturating_sub(1).max(1),
        width,
        width + 1,
        2 * width + 3,
        5 * width + 1,
    ];
    counts.sort_unstable();
    counts.dedup();
    counts
}

/// Calls `f` with every subset of `0..n` of size 1..=max, as a sorted index list.
fn for_each_subset(n: usize, max: usize, f: &mut dyn FnMut(&[usize])) {
    fn walk(
        start: usize,
        n: usize,
        max: usize,
        picked: &mut Vec<usize>,
        f: &mut dyn FnMut(&[usize]),
    ) {
        if !picked.is_empty() {
            f(picked);
        }
        if picked.len() == max {
            return;
        }
        for next in start..n {
            picked.push(next);
            walk(next + 1, n, max, picked, f);
            picked.pop();
        }
    }
    walk(0, n, max, &mut Vec::new(), f);
}

/// Reconstructs every failure set of one geometry with `imp`; returns how many were checked.
fn sweep_geometry(imp: Impl, parity: usize, map: &RaidzMap, rng: &mut SeededRng) -> usize {
    let lens: Vec<usize> = (0..map.columns.len())
        .map(|c| map.column_bytes(c))
        .collect();
    let data = random_columns(rng, &lens[parity..]);
    let mut original = generate_vec(Impl::Scalar, parity, &data);
    original.extend(data);
    let mut work = original.clone();
    let mut checked = 0;
    for_each_subset(work.len(), parity, &mut |missing| {
        for &m in missing {
            work[m].fill(0xa5);
        }
        let mut columns: Vec<&mut [u8]> = work.iter_mut().map(Vec::as_mut_slice).collect();
        reconstruct(imp, parity, &mut columns, missing);
        for &m in missing {
            assert!(
                work[m] == original[m],
                "{imp:?} p{parity} {map:?} missing {missing:?}"
            );
        }
        checked += 1;
    });
    assert!(
        work == original,
        "{imp:?} p{parity}: surviving columns untouched"
    );
    checked
}

/// Goal: every raidz geometry (parity 1..=3, parity+1..=16 children) at several block sizes,
/// including one-sector blocks and ragged column lengths, survives every combination of at
/// most `parity` lost columns, on every implementation this machine has (I1). Method: generate
/// parity, garble the lost columns, reconstruct, compare.
#[test]
fn exhaustive_reconstruction_every_geometry() {
    let mut rng = SeededRng::new(7);
    for imp in Impl::available() {
        let mut checked = 0;
        for parity in 1..=3 {
            for children in parity + 1..=16 {
                for sectors in sector_counts(children, parity) {
                    let map = RaidzMap::new(children, parity, 9, 0, sectors * 512);
                    checked += sweep_geometry(imp, parity, &map, &mut rng);
                }
            }
        }
        assert!(
            checked > 10_000,
            "{imp:?}: only {checked} failure sets checked"
        );
    }
}

/// Goal: all implementations produce identical parity (I1) on large ragged input.
#[test]
fn implementations_agree() {
    let mut rng = SeededRng::new(3);
    let data = random_columns(&mut rng, &[16384, 16384, 16384, 15872, 15872, 15872, 15872]);
    let expected = generate_vec(Impl::Scalar, 3, &data);
    for imp in Impl::available() {
        assert_eq!(generate_vec(imp, 3, &data), expected, "{imp:?}");
    }
    assert!(Impl::available().contains(&Impl::best()));
}
