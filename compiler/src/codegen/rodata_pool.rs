//! Read-only data of the generated code, stored once per distinct content.
//!
//! Lowering asks for a packed weight, a Winograd-transformed filter or an index table
//! per node; nodes that read the same constant in the same form (the recurrent weights
//! of an unrolled RNN, a convolution head applied at several scales, tied embeddings)
//! produce the same bytes, and the pool gives them one symbol. A blob's identity is its
//! content: the constant and its packing determine the bytes, and two forms with equal
//! bytes are interchangeable, so nothing can be shared wrongly. Blobs are defined in the
//! order first asked for, so the artifact is the same on every run.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};

use cranelift_module::{DataDescription, DataId, Module};

use super::derived_weights::{Program, Sources};

/// One stored blob.
struct Blob {
    id: DataId,
    bytes: Box<[u8]>,
    /// Weight bytes (the model's constants, transformed) rather than a table.
    weight: bool,
    /// The nodes that read it, in request order (a node asking twice appears twice).
    readers: Vec<usize>,
    /// What it holds, for reports: the constant it was derived from.
    label: String,
}

/// A blob several nodes read, for `nnc inspect` and the compile report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SharedBlob {
    /// The constant it was derived from.
    pub label: String,
    pub bytes: usize,
    /// Indices (in the lowered graph) of the nodes reading it.
    pub nodes: Vec<usize>,
}

/// A weight blob a later variant copies out of stored ones (see `derived_weights`):
/// zeroed writable memory in the artifact, filled by its variant before first use.
pub struct Derived {
    pub id: DataId,
    /// The variants that read it (each fills it before its first inference; a process
    /// runs one variant).
    pub variants: Vec<usize>,
    pub len: usize,
    pub programs: Vec<Program>,
    bytes: Box<[u8]>,
}

/// One call of the copy program: `program` fills `dst` from `src`.
pub struct CopyJob {
    pub dst: DataId,
    pub src: DataId,
    pub program: DataId,
}

#[derive(Default)]
pub struct RodataPool {
    blobs: Vec<Blob>,
    by_hash: HashMap<(usize, u64), Vec<usize>>,
    /// While a node is lowered a second time (its task function for thread pools), its
    /// requests find the blobs of the first lowering and are not counted again.
    second_lowering: bool,
    /// The variant of a multi-versioned library being lowered, when after the first:
    /// its weights may be derived from the stored ones.
    deriving_for: Option<usize>,
    sources: Sources,
    /// Stored blobs `sources` indexes.
    indexed: usize,
    derived: Vec<Derived>,
    derived_by_hash: HashMap<(usize, u64), Vec<usize>>,
}

impl RodataPool {
    /// The symbol holding `bytes` for `node`: an existing one with the same content, or
    /// a new one declared in `module` (defined by [`Self::define_all`]).
    pub fn intern<M: Module>(
        &mut self,
        module: &mut M,
        bytes: Vec<u8>,
        weight: bool,
        node: usize,
        label: &str,
    ) -> Result<DataId, String> {
        let mut h = DefaultHasher::new();
        bytes.hash(&mut h);
        let key = (bytes.len(), h.finish());
        if let Some(id) = self.find(key, &bytes, weight, node) {
            return Ok(id);
        }
        if let (true, Some(variant)) = (weight, self.deriving_for) {
            if let Some(id) = self.derive(module, variant, key, bytes.as_slice())? {
                return Ok(id);
            }
        }
        let id = module
            .declare_anonymous_data(false, false)
            .map_err(|e| e.to_string())?;
        self.by_hash.entry(key).or_default().push(self.blobs.len());
        self.blobs.push(Blob {
            id,
            bytes: bytes.into_boxed_slice(),
            weight,
            readers: vec![node],
            label: label.to_string(),
        });
        Ok(id)
    }

    /// The stored blob holding `bytes`, recording the read.
    fn find(
        &mut self,
        key: (usize, u64),
        bytes: &[u8],
        weight: bool,
        node: usize,
    ) -> Option<DataId> {
        if let Some(list) = self.by_hash.get(&key) {
            for &i in list {
                let blob = &mut self.blobs[i];
                if *blob.bytes == *bytes {
                    blob.weight |= weight;
                    if !self.second_lowering {
                        blob.readers.push(node);
                    }
                    return Some(blob.id);
                }
            }
        }
        None
    }

    /// A blob `variant` reads, derived from the stored ones: the one already derived
    /// with these bytes (for this or another variant), or a new one, where that is
    /// worth it.
    fn derive<M: Module>(
        &mut self,
        module: &mut M,
        variant: usize,
        (len, hash): (usize, u64),
        bytes: &[u8],
    ) -> Result<Option<DataId>, String> {
        let key = (len, hash);
        if let Some(list) = self.derived_by_hash.get(&key) {
            if let Some(&i) = list.iter().find(|&&i| *self.derived[i].bytes == *bytes) {
                let d = &mut self.derived[i];
                if !d.variants.contains(&variant) {
                    d.variants.push(variant);
                }
                return Ok(Some(d.id));
            }
        }
        let Some(programs) = self.sources.derive(bytes) else {
            return Ok(None);
        };
        let id = module
            .declare_anonymous_data(true, false)
            .map_err(|e| e.to_string())?;
        self.derived_by_hash
            .entry(key)
            .or_default()
            .push(self.derived.len());
        self.derived.push(Derived {
            id,
            variants: vec![variant],
            len,
            programs,
            bytes: bytes.into(),
        });
        Ok(Some(id))
    }

    /// Indexes every stored weight blob as a source of derived ones.
    fn index_sources(&mut self) {
        let mut sources = Sources::default();
        for (i, blob) in self.blobs.iter().enumerate().filter(|(_, b)| b.weight) {
            sources.add(i, &blob.bytes);
        }
        sources.seal();
        self.sources = sources;
        self.indexed = self.blobs.len();
    }

    /// Lowering `variant` of a multi-versioned library (`None`: a single-variant one)
    /// begins: the weights of a variant after the first may be derived.
    pub fn begin_variant(&mut self, variant: Option<usize>) {
        self.deriving_for = variant.filter(|&v| v > 0);
        if self.deriving_for.is_some() && self.indexed < self.blobs.len() {
            self.index_sources();
        }
    }

    /// The copies each variant runs before its first inference, by variant: their
    /// programs become read-only tables here.
    pub fn copy_jobs<M: Module>(
        &mut self,
        module: &mut M,
        variants: usize,
    ) -> Result<Vec<Vec<CopyJob>>, String> {
        let mut jobs: Vec<Vec<CopyJob>> = (0..variants).map(|_| vec![]).collect();
        let derived = std::mem::take(&mut self.derived);
        for d in &derived {
            for p in &d.programs {
                let program = self.intern(module, p.bytes(), false, 0, "weight copies")?;
                for &v in &d.variants {
                    jobs[v].push(CopyJob {
                        dst: d.id,
                        src: self.blobs[p.source].id,
                        program,
                    });
                }
            }
        }
        self.derived = derived;
        Ok(jobs)
    }

    /// Bytes of weights derived at run time rather than stored.
    pub fn derived_weight_bytes(&self) -> usize {
        self.derived.iter().map(|d| d.len).sum()
    }

    /// Marks the requests that follow as a node's second lowering (or, with false, the
    /// end of it): they reuse blobs without counting as reads.
    pub fn set_second_lowering(&mut self, on: bool) {
        self.second_lowering = on;
    }

    /// Weight bytes stored (each distinct blob once).
    pub fn weight_bytes(&self) -> usize {
        self.blobs
            .iter()
            .filter(|b| b.weight)
            .map(|b| b.bytes.len())
            .sum()
    }

    /// Weight bytes as the nodes asked for them, before sharing.
    pub fn requested_weight_bytes(&self) -> usize {
        self.blobs
            .iter()
            .filter(|b| b.weight)
            .map(|b| b.bytes.len() * b.readers.len())
            .sum()
    }

    /// The weight blobs more than one node reads, largest first.
    pub fn shared(&self) -> Vec<SharedBlob> {
        let mut shared: Vec<SharedBlob> = self
            .blobs
            .iter()
            .filter(|b| b.weight)
            .filter_map(|b| {
                let mut nodes = b.readers.clone();
                nodes.dedup();
                (nodes.len() > 1).then(|| SharedBlob {
                    label: b.label.clone(),
                    bytes: b.bytes.len(),
                    nodes,
                })
            })
            .collect();
        shared.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.nodes.cmp(&b.nodes)));
        shared
    }

    /// Defines every blob in `module`, `align`-byte aligned, in the order first asked for.
    pub fn define_all<M: Module>(self, module: &mut M, align: u64) -> Result<(), String> {
        for blob in self.blobs {
            let mut d = DataDescription::new();
            d.define(blob.bytes);
            d.set_align(align);
            module.define_data(blob.id, &d).map_err(|e| e.to_string())?;
        }
        for derived in self.derived {
            let mut d = DataDescription::new();
            d.define_zeroinit(derived.len);
            d.set_align(align);
            module
                .define_data(derived.id, &d)
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    }
}
