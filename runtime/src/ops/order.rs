//! The memory order of a result: contiguous, or channels-last where the
//! input that sets it is (PyTorch's memory-format propagation). An op
//! that keeps channels-last runs on its operands' layouts permuted to
//! `[N, H, W, C]`, where the result is contiguous, and hands back that
//! result seen as `[N, C, H, W]`: no copy, no kernel of its own.

use crate::layout::Layout;

/// `[N, C, H, W]` seen as `[N, H, W, C]`.
const TO_NHWC: [usize; 4] = [0, 2, 3, 1];
/// `[N, H, W, C]` seen as `[N, C, H, W]`.
const TO_NCHW: [usize; 4] = [0, 3, 1, 2];

/// How an elementwise op over operands broadcast to one shape writes its
/// result: `Some` when the first operand of exactly that shape (no
/// broadcast dim) is channels-last, so the result is too.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ChannelsLast;

impl ChannelsLast {
    /// The order of a result of `dims` over `layouts` (each broadcast to
    /// `dims`): set by the first operand that spans `dims` without
    /// broadcasting.
    pub(crate) fn pick(dims: &[usize], layouts: &[&Layout]) -> Option<ChannelsLast> {
        let first = layouts
            .iter()
            .find(|l| l.dims() == dims && !l.strides().contains(&0))?;
        first.prefers_channels_last().then_some(ChannelsLast)
    }

    /// `l` (of the result's dims) as `[N, H, W, C]`.
    pub(crate) fn apply(self, l: &Layout) -> Layout {
        l.permute(&TO_NHWC)
    }

    /// The result's dims as `[N, H, W, C]`, what the kernel writes
    /// row-major.
    pub(crate) fn dims(self, dims: &[usize]) -> Vec<usize> {
        TO_NHWC.iter().map(|&p| dims[p]).collect()
    }

    /// The layout of the result of `dims` (`[N, C, H, W]`): `order`'s, or
    /// contiguous without one.
    pub(crate) fn result(order: Option<ChannelsLast>, dims: &[usize]) -> Layout {
        match order {
            Some(o) => Layout::contiguous(&o.dims(dims)).permute(&TO_NCHW),
            None => Layout::contiguous(dims),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channels_last_results_round_trip() {
        let dims = [2, 3, 4, 5];
        let cl = Layout::channels_last(dims);
        let order = ChannelsLast::pick(&dims, &[&cl]).expect("channels-last");
        assert_eq!(order.apply(&cl), Layout::contiguous(&[2, 4, 5, 3]));
        assert_eq!(ChannelsLast::result(Some(order), &dims), cl);
        assert_eq!(
            cl.result_like(&[2, 7, 2, 2]),
            Layout::channels_last([2, 7, 2, 2])
        );
        // Contiguous, broadcast or both-ways inputs keep the row-major order.
        let c = Layout::contiguous(&dims);
        assert_eq!(ChannelsLast::pick(&dims, &[&c, &cl]), None);
        let b = Layout::contiguous(&[1, 3, 1, 1]).broadcast_to(&dims);
        assert_eq!(ChannelsLast::pick(&dims, &[&b, &cl]), Some(order));
        let both = Layout::channels_last([2, 3, 1, 1]);
        assert!(!both.prefers_channels_last());
        assert_eq!(
            both.result_like(&[2, 3, 1, 1]),
            Layout::contiguous(&[2, 3, 1, 1])
        );
        assert_eq!(ChannelsLast::result(None, &dims), c);
    }
}
