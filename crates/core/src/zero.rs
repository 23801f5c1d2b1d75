//! ZeroRedundancyOptimizer's partition of the parameters over the ranks (PyTorch 2.11,
//! `torch/distributed/optim/zero_redundancy_optimizer.py`, `_partition_parameters`), which both
//! the trainer (whose optimizer on each rank is over its part) and the estimate (whose optimizer
//! state and step temporaries are that part's) take from here.
//!
//! PyTorch sorts the parameters by element count, largest first (a stable sort: equal counts keep
//! the model's order), and gives each in turn to the rank with the fewest elements so far (the
//! lowest such rank on a tie). A rank's local optimizer holds its parameters in that sorted
//! order, which is the order its step visits them. A rank may get none (fewer parameters than
//! ranks): its optimizer steps over nothing.

/// For each rank of `world`, the indices into `numels` (the parameters in the model's order) of
/// the parameters it owns, in the order its optimizer holds them.
pub fn partition(numels: &[u64], world: usize) -> Vec<Vec<usize>> {
    let world = world.max(1);
    let mut order: Vec<usize> = (0..numels.len()).collect();
    // `sorted(..., key=numel, reverse=True)` is stable: equal counts keep the model's order.
    order.sort_by(|&a, &b| numels[b].cmp(&numels[a]));
    let mut sizes = vec![0u64; world];
    let mut parts = vec![Vec::new(); world];
    for i in order {
        // `_get_min_index`: the first rank holding the fewest elements.
        let rank = (0..world).min_by_key(|&r| (sizes[r], r)).expect("a world has ranks");
        parts[rank].push(i);
        sizes[rank] = sizes[rank].saturating_add(numels[i]);
    }
    parts
}

/// The rank whose part holds the most elements (the lowest such rank on a tie): the one whose
/// optimizer state is the largest.
pub fn largest_part(numels: &[u64], world: usize) -> usize {
    let parts = partition(numels, world);
    let size = |r: usize| parts[r].iter().map(|&i| numels[i]).sum::<u64>();
    (0..parts.len()).max_by_key(|&r| (size(r), std::cmp::Reverse(r))).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_largest_go_first_each_to_the_emptiest_rank() {
        // An MLP 16 -> 64 -> 64 -> 3: weights and biases in the model's order.
        let numels = [1024, 64, 4096, 64, 192, 3];
        // Sorted: 4096 (2), 1024 (0), 192 (4), 64 (1), 64 (3), 3 (5).
        assert_eq!(partition(&numels, 2), vec![vec![2], vec![0, 4, 1, 3, 5]]);
        assert_eq!(partition(&numels, 3), vec![vec![2], vec![0], vec![4, 1, 3, 5]]);
        assert_eq!(largest_part(&numels, 2), 0);
        assert_eq!(largest_part(&numels, 3), 0);
    }

    #[test]
    fn ties_keep_the_models_order_and_go_to_the_lowest_rank() {
        assert_eq!(partition(&[5, 5, 5, 5], 2), vec![vec![0, 2], vec![1, 3]]);
        assert_eq!(largest_part(&[5, 5, 5, 5], 2), 0);
        assert_eq!(largest_part(&[5, 5, 5], 2), 0);
        assert_eq!(largest_part(&[1, 9, 1], 2), 0);
        assert_eq!(largest_part(&[9, 1, 1, 1], 2), 0);
        assert_eq!(largest_part(&[4, 3, 3], 2), 1);
    }

    #[test]
    fn every_parameter_is_owned_once_and_a_world_larger_than_the_model_leaves_ranks_empty() {
        let numels = [7, 1, 3];
        let parts = partition(&numels, 5);
        assert_eq!(parts, vec![vec![0], vec![2], vec![1], vec![], vec![]]);
        for world in 1..8 {
            let mut all: Vec<usize> = partition(&numels, world).concat();
            all.sort();
            assert_eq!(all, vec![0, 1, 2], "world {world}");
        }
        assert_eq!(partition(&numels, 1), vec![vec![0, 2, 1]]);
    }
}
