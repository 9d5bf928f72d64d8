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

#[derive(Default)]
pub struct RodataPool {
    blobs: Vec<Blob>,
    by_hash: HashMap<(usize, u64), Vec<usize>>,
    /// While a node is lowered a second time (its task function for thread pools), its
    /// requests find the blobs of the first lowering and are not counted again.
    second_lowering: bool,
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
        if let Some(list) = self.by_hash.get(&key) {
            for &i in list {
                let blob = &mut self.blobs[i];
                if *blob.bytes == *bytes {
                    blob.weight |= weight;
                    if !self.second_lowering {
                        blob.readers.push(node);
                    }
                    return Ok(blob.id);
                }
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
        Ok(())
    }
}
