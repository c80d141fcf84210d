//! LoRA adapters on the seven projections, single or dual (retain + forget) with per-sample routing.
//!
//! A LoRA pair adds `scale · B·A·x` to a frozen projection (`A: (r, in)`, `B: (out, r)`, scale `alpha/r`,
//! PEFT's layout and initialisation: `A` Kaiming-uniform, `B` zero).
//!
//! Dual adapters and routing: on a *routed* sample only the forget adapter may receive gradients, while the
//! function computed stays exactly `W·x + s_r·B_r·A_r·x + s_f·B_f·A_f·x`. In one pass we use the rank-3r
//! form `[B_r | B_f | B_r'] · (m ⊙ [A_r; A_f; A_r']·x)` where `A_r'`, `B_r'` are the retain weights
//! *detached* and the per-row mask `m` is `[s_r, s_f, 0]` on ordinary rows and `[0, s_f, s_r]` on routed rows.
//! The value is identical on every row; on routed rows the retain contribution flows only through the
//! detached copy, so `x` still receives its full gradient but the retain parameters receive exactly none.
//!
//! What an *ordinary* (unflagged) sample trains is the [`Routing`] mode: both adapters (`Shared`, the
//! default) or the retain adapter alone (`Exclusive`, a strict partition of the data between the two). The
//! general form is rank 4r, `[A_r; A_f; A_r'; A_f']` with each adapter live on the rows it learns from and
//! detached on the others; a batch whose rows all agree takes the rank-2r form with the right copies detached.

use crate::model::ModelConfig;
pub use crate::model::Target;
use candle_core::{DType, Device, Tensor, Var};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Rank, alpha, targets and whether a forget adapter rides along.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoraConfig {
    /// LoRA rank `r`: rows of `A`, columns of `B`.
    pub rank: usize,
    /// LoRA alpha; the delta is scaled by `alpha / r`.
    pub alpha: f64,
    /// The projections that get a LoRA pair, in every layer.
    pub targets: Vec<Target>,
    /// Two adapters (retain, forget) with per-sample gradient routing.
    pub dual: bool,
}

impl Default for LoraConfig {
    fn default() -> Self {
        LoraConfig { rank: 16, alpha: 32.0, targets: Target::ALL.to_vec(), dual: false }
    }
}

/// Which of the two adapters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Which {
    /// The adapter kept after training: it learns from unflagged samples.
    Retain,
    /// The adapter that routed (flagged) samples train, ablated to remove what they taught.
    Forget,
}

impl Which {
    /// The PEFT adapter name used on disk.
    pub fn name(self) -> &'static str {
        match self {
            Which::Retain => "retain",
            Which::Forget => "forget",
        }
    }
}

/// One LoRA pair: `A: (r, in)`, `B: (out, r)`, trainable.
#[derive(Debug, Clone)]
pub struct LoraPair {
    /// The down factor `A: (r, in)`, Kaiming-uniform at start.
    pub a: Var,
    /// The up factor `B: (out, r)`, zero at start so a fresh adapter changes nothing.
    pub b: Var,
}

/// The key of one adapted projection.
pub type Site = (usize, Target);

/// One adapter: a LoRA pair per adapted projection.
#[derive(Debug, Clone, Default)]
pub struct Adapter {
    /// The LoRA pair of each adapted `(layer, projection)`.
    pub pairs: BTreeMap<Site, LoraPair>,
}

impl Adapter {
    /// PEFT's initialisation: `A` Kaiming-uniform (a = sqrt(5), i.e. bound `1/sqrt(in)`), `B` zero; `A`
    /// drawn from `seed`, so that a run is reproducible (candle's `Tensor::rand` draws from an unseeded
    /// generator: the routing toy's outcome varied from run to run with everything else fixed).
    pub fn new(cfg: &LoraConfig, model: &ModelConfig, device: &Device, seed: u64) -> candle_core::Result<Adapter> {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut pairs = BTreeMap::new();
        for layer in 0..model.num_layers {
            for &t in &cfg.targets {
                let (i, o) = t.dims(model);
                let bound = 1.0 / (i as f64).sqrt();
                let bound = bound as f32;
                let a: Vec<f32> = (0..cfg.rank * i).map(|_| rng.random_range(-bound..bound)).collect();
                let a = Var::from_tensor(&Tensor::from_vec(a, (cfg.rank, i), device)?)?;
                let b = Var::from_tensor(&Tensor::zeros((o, cfg.rank), DType::F32, device)?)?;
                pairs.insert((layer, t), LoraPair { a, b });
            }
        }
        Ok(Adapter { pairs })
    }

    /// Every trainable tensor, `A` then `B` per site.
    pub fn vars(&self) -> Vec<Var> {
        self.pairs.values().flat_map(|p| [p.a.clone(), p.b.clone()]).collect()
    }
}

/// The adapters on a policy: retain always, forget when dual; with inference scales.
#[derive(Debug, Clone)]
pub struct AdapterSet {
    /// Rank, alpha, targets and duality shared by both adapters.
    pub config: LoraConfig,
    /// The retain adapter, always present (the only one when not dual).
    pub retain: Adapter,
    /// The forget adapter, present when [`LoraConfig::dual`] is set.
    pub forget: Option<Adapter>,
    /// Multipliers on each adapter's `alpha/r`: `(1, 0)` ablates the forget adapter.
    pub scales: (f64, f64),
    /// What unflagged samples train (flagged ones always train the forget adapter alone).
    pub routing: Routing,
}

/// Which adapters an unflagged sample trains, when there are two.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Routing {
    /// Both adapters (gradient routing as in Cloud et al.: only the flagged data is confined).
    #[default]
    Shared,
    /// The retain adapter alone: the forget adapter learns only from flagged samples, the retain adapter only
    /// from the others, so that the retain adapter alone still does what the unflagged samples taught.
    Exclusive,
}

impl AdapterSet {
    /// Fresh adapters with PEFT's initialisation.
    pub fn new(config: LoraConfig, model: &ModelConfig, device: &Device, seed: u64) -> candle_core::Result<AdapterSet> {
        let retain = Adapter::new(&config, model, device, seed)?;
        let forget = if config.dual { Some(Adapter::new(&config, model, device, seed ^ 0xf0f0_f0f0)?) } else { None };
        Ok(AdapterSet { config, retain, forget, scales: (1.0, 1.0), routing: Routing::Shared })
    }

    /// Sets every `B` to small random values drawn from `seed` (tests: with `B = 0`, `A` gets no
    /// gradient; seeded, so that what a test samples from them is the same on every run).
    pub fn randomize_b(&self, std: f64, seed: u64) -> candle_core::Result<()> {
        use rand::SeedableRng;
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        for ad in std::iter::once(&self.retain).chain(self.forget.iter()) {
            for p in ad.pairs.values() {
                let values = crate::model::weights::normal_values(&mut rng, p.b.elem_count(), 0.0, std as f32);
                p.b.set(&Tensor::from_vec(values, p.b.shape(), p.b.device())?)?;
            }
        }
        Ok(())
    }

    /// All trainable tensors (retain, then forget).
    pub fn vars(&self) -> Vec<Var> {
        let mut v = self.retain.vars();
        if let Some(f) = &self.forget {
            v.extend(f.vars());
        }
        v
    }

    /// `alpha / r`.
    pub fn base_scale(&self) -> f64 {
        self.config.alpha / self.config.rank as f64
    }

    /// The LoRA contribution at one site for `x: (n, in)`; `routed` gives per-row routing (len n) or none.
    /// Returns `None` when the site has no adapter.
    pub fn delta(&self, site: Site, x: &Tensor, routed: Option<&[bool]>) -> candle_core::Result<Option<Tensor>> {
        match self.factors(site, x.dim(0)?, routed)? {
            Some(f) => Ok(Some(f.apply(x)?)),
            None => Ok(None),
        }
    }

    /// The stacked factors at one site for `n` input rows under `routed` (see the module docs); `None` when
    /// the site has no adapter.
    pub fn factors(&self, site: Site, n: usize, routed: Option<&[bool]>) -> candle_core::Result<Option<LoraFactors>> {
        let Some(r) = self.retain.pairs.get(&site) else { return Ok(None) };
        let c = self.base_scale();
        let (sr, sf) = ((self.scales.0 * c) as f32, (self.scales.1 * c) as f32);
        let f = self.forget.as_ref().and_then(|f| f.pairs.get(&site));
        let dev = r.a.device();
        let Some(f) = f.filter(|_| sf != 0.0 || routed.is_some_and(|m| m.iter().any(|&b| b))) else {
            // Single adapter (or forget ablated with nothing routed): the plain rank-r form.
            let rank = r.a.dim(0)?;
            let scales = Tensor::from_vec(vec![sr; rank], (1, rank), dev)?;
            return Ok(Some(LoraFactors { a: r.a.as_tensor().clone(), b: r.b.as_tensor().clone(), scales }));
        };
        let rank = self.config.rank;
        // Which adapters learn from a row: (retain, forget).
        let exclusive = self.routing == Routing::Exclusive;
        let live = |routed_row: bool| if routed_row { (false, true) } else { (true, !exclusive) };
        let weights = |live: bool, t: &Var| if live { t.as_tensor().clone() } else { t.as_tensor().detach() };
        let rows = routed.unwrap_or(&[]);
        if routed.is_some() && rows.len() != n {
            candle_core::bail!("routing mask has {} rows, input has {n}", rows.len());
        }
        let uniform = rows.iter().all(|&b| b == rows.first().copied().unwrap_or(false));
        if uniform {
            let (lr, lf) = live(rows.first().copied().unwrap_or(false));
            let a = Tensor::cat(&[weights(lr, &r.a), weights(lf, &f.a)], 0)?;
            let b = Tensor::cat(&[weights(lr, &r.b), weights(lf, &f.b)], 1)?;
            let col: Vec<f32> = (0..2 * rank).map(|j| if j < rank { sr } else { sf }).collect();
            let scales = Tensor::from_vec(col, (1, 2 * rank), dev)?;
            return Ok(Some(LoraFactors { a, b, scales }));
        }
        let a = Tensor::cat(&[r.a.as_tensor(), f.a.as_tensor(), &r.a.as_tensor().detach(), &f.a.as_tensor().detach()], 0)?;
        let b = Tensor::cat(&[r.b.as_tensor(), f.b.as_tensor(), &r.b.as_tensor().detach(), &f.b.as_tensor().detach()], 1)?;
        let mut m = Vec::with_capacity(n * 4 * rank);
        for &routed_row in rows {
            let (lr, lf) = live(routed_row);
            for scale in [if lr { sr } else { 0.0 }, if lf { sf } else { 0.0 }, if lr { 0.0 } else { sr }, if lf { 0.0 } else { sf }] {
                m.extend(std::iter::repeat_n(scale, rank));
            }
        }
        let scales = Tensor::from_vec(m, (n, 4 * rank), dev)?;
        Ok(Some(LoraFactors { a, b, scales }))
    }
}

/// The LoRA factors of one site as one low-rank product: `delta = ((x·Aᵀ) ⊙ scales)·Bᵀ` with `A: (R, in)`,
/// `B: (out, R)` and `scales: (1, R)` (every row alike) or `(n, R)` (per row). One adapter has `R = r`;
/// dual adapters stack retain and forget (and detached copies) to `2r` or `4r`.
#[derive(Debug, Clone)]
pub struct LoraFactors {
    /// The stacked `A` factors, `(R, in)`.
    pub a: Tensor,
    /// The stacked `B` factors, `(out, R)`.
    pub b: Tensor,
    /// Per-rank multipliers (`alpha/r` times the adapter's scale, or 0 to mask it), `(1, R)` or `(n, R)`.
    pub scales: Tensor,
}

impl LoraFactors {
    /// The delta from candle ops, for `x: (.., in)`.
    pub fn apply(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let dims = x.dims().to_vec();
        let k = *dims.last().unwrap_or(&0);
        let x2 = x.reshape((x.elem_count() / k.max(1), k))?;
        let h = x2.matmul(&self.a.t()?)?.broadcast_mul(&self.scales)?;
        let mut out_dims = dims;
        *out_dims.last_mut().expect("an input has at least one dimension") = self.b.dim(0)?;
        h.matmul(&self.b.t()?)?.reshape(out_dims)
    }
}
