//! [`InoMap`]: the kernel's inode numbers versus the dataset's (I1 of the crate block).

use tarn_engine::posix::Ino;

/// The kernel's root inode number.
pub(crate) const KERNEL_ROOT: u64 = 1;

/// Swaps the dataset's root inode with the kernel's root (1) and passes every other number
/// through: an involution, so the same function maps both ways.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct InoMap {
    root: Ino,
}

impl InoMap {
    /// The map for a dataset whose root directory is `root`.
    pub(crate) fn new(root: Ino) -> InoMap {
        InoMap { root }
    }

    fn swap(self, ino: u64) -> u64 {
        if ino == self.root {
            KERNEL_ROOT
        } else if ino == KERNEL_ROOT {
            self.root
        } else {
            ino
        }
    }

    /// The dataset's inode for a kernel inode number.
    pub(crate) fn to_dataset(self, kernel: u64) -> Ino {
        self.swap(kernel)
    }

    /// The kernel's inode number for a dataset inode.
    pub(crate) fn to_kernel(self, ino: Ino) -> u64 {
        self.swap(ino)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(root: Ino, pairs: &[(u64, Ino)]) {
        let map = InoMap::new(root);
        for &(kernel, dataset) in pairs {
            assert_eq!(map.to_dataset(kernel), dataset, "kernel {kernel}");
            assert_eq!(map.to_kernel(dataset), kernel, "dataset {dataset}");
        }
    }

    #[test]
    fn root_swaps_with_one_and_the_rest_pass_through() {
        check(34, &[(1, 34), (34, 1), (2, 2), (35, 35)]);
        check(1, &[(1, 1), (2, 2)]);
    }
}
