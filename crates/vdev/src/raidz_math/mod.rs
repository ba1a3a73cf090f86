//! Raidz parity math: generation of P, Q and R, and reconstruction of up to three missing
//! columns, with a portable implementation and an AVX2 one chosen at run time.
//!
//! # Model
//! Over GF(2^8) (see the `gf` module), with `D_0 .. D_{n-1}` the data columns in order:
//! ```text
//!   P = D_0 ^ D_1 ^ ... ^ D_{n-1}
//!   Q = ((D_0 * 2 ^ D_1) * 2 ^ D_2) ... = sum 2^(n-1-i) * D_i      (Horner, as OpenZFS)
//!   R = ((D_0 * 4 ^ D_1) * 4 ^ D_2) ... = sum 4^(n-1-i) * D_i
//! ```
//! Columns may differ in length; a short data column counts as zero-padded, and every parity
//! column has the length of the longest data column.
//!
//! Reconstruction of a set of missing columns: missing data columns (k of them) are solved
//! from the first k surviving parity rows. The syndrome `S_j = parity_j ^ (row j computed
//! over the surviving data)` equals `sum_m coef(j, m) * D_m` over the missing data columns, so
//! `D = A^-1 * S` with A the k x k coefficient matrix (`gf::invert`). Missing parity rows
//! are then regenerated from the completed data. The common cases are fast paths of the same
//! kernel: one data column from P is a pure XOR sweep (the inverse is `[1]`); two from P+Q
//! need two constant multiplications per byte, because with P among the rows the last missing
//! column is `S_P` XOR the others.
//!
//! # Kernel shape
//! One generic kernel, `sweep`, walks the byte range in chunks (32 or 64 bytes) and for each
//! chunk walks every data column, keeping the P/Q/R accumulators in registers; parity is loaded
//! and stored once per chunk instead of once per column. It is written once over the `Lanes`
//! trait and instantiated for the portable implementation (four u64 words, multiply by two
//! with mask-and-xor) and for AVX2 (two 256-bit registers, multiply by two with
//! compare/add/xor, multiply by a constant with two `vpshufb` nibble tables). Which rows are
//! accumulated is a const generic, so each of the seven row sets compiles to its own loop.
//!
//! # Invariants
//! - I1: every implementation produces the same bytes for the same input (tested over every
//!   geometry and failure set the exhaustive test uses).
//! - I2: at most `parity` columns are reconstructed, and at most three parity rows exist.

pub(crate) mod gf;
mod scalar;

#[cfg(target_arch = "x86_64")]
mod avx2;

#[cfg(test)]
mod tests;

/// An implementation of the parity kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Impl {
    /// Portable code on 64-bit words; always available.
    Scalar,
    /// AVX2 (x86-64 with the `avx2` feature, detected at run time).
    Avx2,
}

impl Impl {
    /// Every implementation this build knows, available or not.
    pub const ALL: [Impl; 2] = [Impl::Scalar, Impl::Avx2];

    /// Whether this machine can run the implementation.
    #[must_use]
    pub fn is_available(self) -> bool {
        match self {
            Impl::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            Impl::Avx2 => avx2::available(),
            #[cfg(not(target_arch = "x86_64"))]
            Impl::Avx2 => false,
        }
    }

    /// Every implementation this machine can run, slowest first.
    #[must_use]
    pub fn available() -> Vec<Impl> {
        Impl::ALL
            .into_iter()
            .filter(|imp| imp.is_available())
            .collect()
    }

    /// The fastest implementation this machine can run.
    #[must_use]
    pub fn best() -> Impl {
        if Impl::Avx2.is_available() {
            Impl::Avx2
        } else {
            Impl::Scalar
        }
    }

    /// Short lowercase name, for benchmarks and messages.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Impl::Scalar => "scalar",
            Impl::Avx2 => "avx2",
        }
    }
}

/// Largest chunk any implementation processes at once.
const CHUNK_MAX: usize = 128;

/// A chunk of bytes held in registers, and the field operations on it. Implementations must
/// be pure: the same inputs give the same outputs on every implementation.
pub(crate) trait Lanes: Copy {
    /// Bytes per chunk (at most [`CHUNK_MAX`]).
    const BYTES: usize;
    /// Precomputed form of "multiply by constant c".
    type Table: Copy;
    fn zero() -> Self;
    /// Loads exactly `BYTES` bytes.
    fn load(src: &[u8]) -> Self;
    /// Stores exactly `BYTES` bytes.
    fn store(self, dst: &mut [u8]);
    fn xor(self, other: Self) -> Self;
    /// Multiplies every byte by 2.
    fn mul2(self) -> Self;
    fn table(c: u8) -> Self::Table;
    /// Multiplies every byte by the table's constant.
    fn mul(self, table: &Self::Table) -> Self;
    /// Multiplies every byte by 4.
    #[inline(always)]
    fn mul4(self) -> Self {
        self.mul2().mul2()
    }
}

/// What the kernel does with the accumulated rows of each chunk.
pub(crate) enum Sink<'a, 'b> {
    /// Store each accumulated row (in increasing row order) into its output.
    Parity { outs: &'a mut [&'b mut [u8]] },
    /// Reconstruct missing data: `outs[m] = sum_r inv[m][r] * (acc_r ^ parity[r])`.
    Solve {
        parity: &'a [&'b [u8]],
        outs: &'a mut [&'b mut [u8]],
        inv: [[u8; 3]; 3],
    },
}

/// The parity rows (0 = P, 1 = Q, 2 = R) in the bit set `rows`, in increasing order.
const fn row_list(rows: u8) -> ([usize; 3], usize) {
    let mut list = [0usize; 3];
    let mut count = 0;
    let mut row = 0;
    while row < 3 {
        if rows & (1 << row) != 0 {
            list[count] = row;
            count += 1;
        }
        row += 1;
    }
    (list, count)
}

#[inline(always)]
fn load_at<V: Lanes>(column: &[u8], offset: usize) -> V {
    if let Some(chunk) = column.get(offset..offset + V::BYTES) {
        V::load(chunk)
    } else if offset >= column.len() {
        V::zero()
    } else {
        let mut tmp = [0u8; CHUNK_MAX];
        let tail = &column[offset..];
        tmp[..tail.len()].copy_from_slice(tail);
        V::load(&tmp[..V::BYTES])
    }
}

#[inline(always)]
fn store_at<V: Lanes>(column: &mut [u8], offset: usize, value: V) {
    let len = column.len();
    if let Some(chunk) = column.get_mut(offset..offset + V::BYTES) {
        value.store(chunk);
    } else if offset < len {
        let mut tmp = [0u8; CHUNK_MAX];
        value.store(&mut tmp[..V::BYTES]);
        column[offset..].copy_from_slice(&tmp[..len - offset]);
    }
}

/// The one kernel. `data` holds the data columns in order (`None`: missing, counted as zero);
/// `len` is the parity length. `ROWS` is the set of parity rows to accumulate.
#[inline(always)]
pub(crate) fn sweep<V: Lanes, const ROWS: u8>(
    data: &[Option<&[u8]>],
    len: usize,
    sink: &mut Sink<'_, '_>,
) {
    const { assert!(ROWS != 0 && ROWS < 8) };
    let (rows, count) = row_list(ROWS);
    let mut tables = [[V::table(0); 3]; 3];
    match sink {
        Sink::Parity { outs } => assert_eq!(outs.len(), count, "one output per parity row"),
        Sink::Solve { inv, outs, parity } => {
            assert_eq!(outs.len(), count, "solve needs one row per missing column");
            assert_eq!(parity.len(), count, "solve needs one parity input per row");
            for (m, row) in tables.iter_mut().enumerate().take(count) {
                for (r, table) in row.iter_mut().enumerate().take(count) {
                    *table = V::table(inv[m][r]);
                }
            }
        }
    }
    let mut offset = 0;
    while offset < len {
        let mut acc = [V::zero(); 3];
        for column in data {
            let d = match column {
                Some(column) => load_at::<V>(column, offset),
                None => V::zero(),
            };
            if ROWS & 1 != 0 {
                acc[0] = acc[0].xor(d);
            }
            if ROWS & 2 != 0 {
                acc[1] = acc[1].mul2().xor(d);
            }
            if ROWS & 4 != 0 {
                acc[2] = acc[2].mul4().xor(d);
            }
        }
        match sink {
            Sink::Parity { outs } => {
                for (r, out) in outs.iter_mut().enumerate().take(count) {
                    store_at(out, offset, acc[rows[r]]);
                }
            }
            Sink::Solve { parity, outs, inv } => {
                let mut syndrome = [V::zero(); 3];
                for r in 0..count {
                    syndrome[r] = acc[rows[r]].xor(load_at::<V>(parity[r], offset));
                }
                solve_chunk::<V, ROWS>(&syndrome[..count], inv, &tables, outs, offset);
            }
        }
        offset += V::BYTES;
    }
}

/// Writes one chunk of each missing data column: `outs[m] = sum_r inv[m][r] * syndrome[r]`.
#[inline(always)]
fn solve_chunk<V: Lanes, const ROWS: u8>(
    syndrome: &[V],
    inv: &[[u8; 3]; 3],
    tables: &[[V::Table; 3]; 3],
    outs: &mut [&mut [u8]],
    offset: usize,
) {
    // With P among the rows, the last missing column is S_P minus the others (all P
    // coefficients are 1): only k - 1 columns need multiplications.
    let solved = if ROWS & 1 != 0 {
        syndrome.len() - 1
    } else {
        syndrome.len()
    };
    let mut others = V::zero();
    for (m, out) in outs.iter_mut().enumerate().take(solved) {
        let mut value = V::zero();
        for (r, &s) in syndrome.iter().enumerate() {
            value = match inv[m][r] {
                0 => value,
                1 => value.xor(s),
                _ => value.xor(s.mul(&tables[m][r])),
            };
        }
        others = others.xor(value);
        store_at(out, offset, value);
    }
    if let Some(last) = outs.get_mut(solved) {
        store_at(last, offset, syndrome[0].xor(others));
    }
}

/// Runs [`sweep`] with implementation `imp` for the row set `rows`.
fn dispatch(imp: Impl, rows: u8, data: &[Option<&[u8]>], len: usize, sink: &mut Sink<'_, '_>) {
    assert!(
        imp.is_available(),
        "parity implementation {} is not available here",
        imp.name()
    );
    match imp {
        Impl::Scalar => scalar::sweep_rows(rows, data, len, sink),
        #[cfg(target_arch = "x86_64")]
        Impl::Avx2 => avx2::sweep_rows(rows, data, len, sink),
        #[cfg(not(target_arch = "x86_64"))]
        Impl::Avx2 => unreachable!("checked by is_available"),
    }
}

fn check_parity_count(parity: usize) {
    assert!(
        (1..=tarn_base::limits::RAIDZ_PARITY_MAX).contains(&parity),
        "parity {parity} out of range 1..=3"
    );
}

/// Computes the `parity` parity columns of `data`. Every output must be as long as the
/// longest data column. Panics (a caller bug) if the shapes disagree or `imp` is unavailable.
pub fn generate(imp: Impl, parity: usize, data: &[&[u8]], parity_out: &mut [&mut [u8]]) {
    check_parity_count(parity);
    assert!(!data.is_empty(), "no data columns");
    assert!(
        data.len() + parity <= tarn_base::limits::VDEV_CHILDREN_MAX,
        "too many columns"
    );
    assert_eq!(parity_out.len(), parity, "one output per parity column");
    let len = data.iter().map(|column| column.len()).max().unwrap_or(0);
    for out in parity_out.iter() {
        assert_eq!(
            out.len(),
            len,
            "parity column length must equal the longest data column"
        );
    }
    let columns: Vec<Option<&[u8]>> = data.iter().map(|column| Some(*column)).collect();
    let rows = (1u8 << parity) - 1;
    dispatch(
        imp,
        rows,
        &columns,
        len,
        &mut Sink::Parity { outs: parity_out },
    );
}

/// Rebuilds the columns listed in `missing` (at most `parity` of them, any mix of parity and
/// data) in place. `columns` holds the parity columns first (P, Q, R), then the data columns
/// in order; every buffer already has its final length (data columns may be shorter than
/// parity ones). The contents of missing buffers on entry do not matter.
pub fn reconstruct(imp: Impl, parity: usize, columns: &mut [&mut [u8]], missing: &[usize]) {
    check_parity_count(parity);
    assert!(
        columns.len() > parity,
        "no data columns among {} columns",
        columns.len()
    );
    assert!(
        missing.len() <= parity,
        "{} missing columns exceed parity {parity}",
        missing.len()
    );
    let mut is_missing = vec![false; columns.len()];
    for &index in missing {
        assert!(index < columns.len(), "missing column {index} out of range");
        assert!(!is_missing[index], "missing column {index} listed twice");
        is_missing[index] = true;
    }
    let len = columns[parity..]
        .iter()
        .map(|column| column.len())
        .max()
        .unwrap_or(0);
    for column in &columns[..parity] {
        assert_eq!(
            column.len(),
            len,
            "parity column length must equal the longest data column"
        );
    }
    if is_missing[parity..].iter().any(|&m| m) {
        solve_data(imp, parity, columns, &is_missing, len);
    }
    let missing_rows = (0..parity)
        .filter(|&r| is_missing[r])
        .fold(0u8, |set, r| set | (1 << r));
    if missing_rows != 0 {
        let (parity_cols, data_cols) = columns.split_at_mut(parity);
        let data: Vec<Option<&[u8]>> = data_cols.iter().map(|column| Some(&column[..])).collect();
        let mut outs: Vec<&mut [u8]> = parity_cols
            .iter_mut()
            .enumerate()
            .filter(|(r, _)| is_missing[*r])
            .map(|(_, column)| &mut column[..])
            .collect();
        dispatch(
            imp,
            missing_rows,
            &data,
            len,
            &mut Sink::Parity { outs: &mut outs },
        );
    }
}

/// Solves the missing data columns from the first surviving parity rows.
fn solve_data(
    imp: Impl,
    parity: usize,
    columns: &mut [&mut [u8]],
    is_missing: &[bool],
    len: usize,
) {
    let data_count = columns.len() - parity;
    let lost: Vec<usize> = (0..data_count)
        .filter(|&i| is_missing[parity + i])
        .collect();
    let rows: Vec<usize> = (0..parity)
        .filter(|&r| !is_missing[r])
        .take(lost.len())
        .collect();
    let k = lost.len();
    assert_eq!(
        rows.len(),
        k,
        "not enough surviving parity for {k} data columns"
    );
    let mut matrix = [[0u8; 3]; 3];
    for (r, &row) in rows.iter().enumerate() {
        for (m, &index) in lost.iter().enumerate() {
            matrix[r][m] = gf::coefficient(row, index, data_count);
        }
    }
    let inv = gf::invert(matrix, k).expect("raidz coefficient matrices are invertible (I2)");
    let row_set = rows.iter().fold(0u8, |set, &r| set | (1 << r));
    let (parity_cols, data_cols) = columns.split_at_mut(parity);
    let parity_in: Vec<&[u8]> = rows.iter().map(|&r| &parity_cols[r][..]).collect();
    let mut data: Vec<Option<&[u8]>> = Vec::with_capacity(data_count);
    let mut outs: Vec<&mut [u8]> = Vec::with_capacity(k);
    for (i, column) in data_cols.iter_mut().enumerate() {
        if is_missing[parity + i] {
            data.push(None);
            outs.push(&mut column[..]);
        } else {
            data.push(Some(&column[..]));
        }
    }
    let mut sink = Sink::Solve {
        parity: &parity_in,
        outs: &mut outs,
        inv,
    };
    dispatch(imp, row_set, &data, len, &mut sink);
}
