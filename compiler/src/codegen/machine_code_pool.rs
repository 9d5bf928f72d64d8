//! nnc's machine-code kernels in the generated code, defined once per distinct code.
//!
//! Lowering emits a kernel (a GEMM of some shape, softmax rows) per node that needs
//! one; nodes of the same shape (every layer of a transformer, each key bucket of its
//! attention) emit the same bytes, and the pool gives them one function. The kernels
//! carry no relocations, so equal bytes with the same parameter count are the same
//! function. Functions are defined in the order first asked for, so the artifact is
//! the same on every run.

use std::collections::HashMap;

use cranelift_module::FuncId;

#[derive(Default)]
pub struct MachineCodePool {
    functions: HashMap<(usize, Box<[u8]>), FuncId>,
}

impl MachineCodePool {
    /// The function already defined from `code` taking `params` arguments.
    pub fn get(&self, params: usize, code: &[u8]) -> Option<FuncId> {
        self.functions.get(&(params, code.into())).copied()
    }

    pub fn insert(&mut self, params: usize, code: &[u8], id: FuncId) {
        self.functions.insert((params, code.into()), id);
    }
}
