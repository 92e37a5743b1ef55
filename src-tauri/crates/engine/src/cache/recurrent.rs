//! A linear-attention layer's cache (Qwen3.5's gated delta net): the last
//! few inputs of its causal convolution and its recurrent state matrix.
//! Both have a fixed size whatever the context, like mlx-lm's `ArraysCache`
//! of two entries.

use mlx_rs::Array;

#[derive(Debug, Clone, Default)]
pub struct RecurrentState {
    /// `[B, kernel - 1, conv_dim]`: the convolution's inputs it still needs.
    pub conv: Option<Array>,
    /// `[B, value_heads, value_dim, key_dim]`, f32.
    pub state: Option<Array>,
    offset: i32,
}

impl RecurrentState {
    pub fn offset(&self) -> i32 {
        self.offset
    }

    /// Records that `n` more positions went through the state.
    pub fn advance(&mut self, n: i32) {
        self.offset += n;
    }

    /// The state mixes every position it has seen into one matrix, so it
    /// cannot step back: only "keep everything" is exact.
    pub fn can_trim(&self, n: i32) -> bool {
        n == 0
    }

    pub fn nbytes(&self) -> usize {
        self.conv.as_ref().map_or(0, Array::nbytes) + self.state.as_ref().map_or(0, Array::nbytes)
    }

    pub(super) fn arrays(&self) -> impl Iterator<Item = &Array> {
        self.conv.iter().chain(self.state.iter())
    }

    /// The state by name, for a saved state (persist.rs).
    pub(super) fn named(&self) -> Vec<(&'static str, &Array)> {
        super::present([("conv", self.conv.as_ref()), ("state", self.state.as_ref())])
    }

    /// A state back from its saved arrays, `offset` positions in.
    pub(super) fn from_saved(conv: Option<Array>, state: Option<Array>, offset: i32) -> Self {
        Self { conv, state, offset }
    }
}
