//! x86-64 GEMM micro-kernels as machine code: `f32-gemm-8x48-avx512f` and
//! `f32-gemm-6x16-avx2-fma`, one function per [`GemmSpec`], encoded with iced-x86 and
//! placed in the object with `define_function_bytes`.
//!
//! Why machine code: Cranelift lowers only 128-bit vectors, a quarter of what AVX-512
//! computes per instruction (measured here: 43 GFLOP/s for the best 128-bit tile vs
//! 150 for OpenBLAS). The rest of the model stays Cranelift code; these kernels have the
//! same arguments and meaning as the Cranelift kernel of [`super::gemm_tile`]
//! (`A, B, C, addend_0, addend_1, ...`, System V calling convention).
//!
//! Shape of the code: C is covered by `MR × NR` register tiles (AVX-512: 8 rows × 3
//! zmm = 24 accumulators, 3 registers for B and 2 for broadcasts of A; AVX2: 6 × 2 ymm =
//! 12 accumulators, 2 for B, 1 broadcast, 1 tail mask). A K step loads the NR floats of
//! one row of B once and broadcasts each of the MR elements of A once: 11 loads per 24
//! FMAs with AVX-512, within the two load ports' budget. Column panels are the outer
//! loop (a panel of packed B, `K·NR·4` bytes, stays in L1/L2 while every row tile
//! sweeps it), row tiles the inner one; the last partial panel and the last partial row
//! tile are separate copies of the tile code, with masked loads and stores where C or an
//! unpacked B ends. The epilogue scales by alpha, adds the addends (per-row bias,
//! per-column bias, residual), applies the activation and stores, all on the
//! accumulator registers.

use iced_x86::code_asm::*;

use super::activation::{activate, supports_activation_with};
use super::asm::{emit_consts, imm, AsmResult, Consts, TailMasks, VOp, Vecs, Vector, AVX2_MASK};
use crate::codegen::kernels::gemm::{ALayout, Addend, BLayout, GemmSpec, RunTimeStrides};
use crate::codegen::options::GemmOrder;
use crate::ops::Activation;

/// Whether the machine-code kernel computes `spec` (else the Cranelift kernel does).
pub fn supports(spec: &GemmSpec) -> bool {
    spec.c_col_stride == 1
        && !matches!(spec.b, BLayout::Gather { .. })
        && match spec.b {
            BLayout::Taps {
                out_w,
                out_h,
                row_step,
            } => spec.b_taps.len() == spec.k && out_w * out_h == spec.n && row_step >= out_w,
            _ => true,
        }
        && spec.addends.iter().all(|a| a.col_stride <= 1)
        && gemm_supports_activation(spec.activation)
        && (!spec.rows_at_run_time
            || (matches!(spec.a, ALayout::Strided { .. })
                && !matches!(spec.b, BLayout::Taps { .. })))
        && (!spec.cols_at_run_time || matches!(spec.b, BLayout::Rows { .. }))
        && (!spec.run_time_strides.b() || matches!(spec.b, BLayout::Rows { .. }))
        && (spec.run_time_strides != RunTimeStrides::AK
            || (matches!(spec.b, BLayout::Rows { .. })
                && matches!(spec.a, ALayout::Strided { col_stride: 1, .. })))
}

/// The GEMM tile has three free registers after its K loop (B's and the broadcasts'),
/// enough for every activation.
fn gemm_supports_activation(act: Activation) -> bool {
    supports_activation_with(act, 3)
}

const F32: usize = 4;
/// K steps per loop iteration.
const K_UNROLL: usize = 4;

/// K steps per block for panels of `nr` columns: the block of a B panel (`kc · nr`
/// floats) then stays in L1 (24 KB of the 48 KB here) while every row tile sweeps it,
/// and the blocks of A (`M · kc`) in L2. Unblocked, a panel of a long-K GEMM (conv
/// 3×3×256: K = 2304) spilled to L2 and A streamed from L3 once per panel.
pub fn k_block(nr: usize) -> usize {
    let kc = 24 * 1024 / (nr * F32);
    kc / K_UNROLL * K_UNROLL
}

/// Bytes of A up to which a GEMM of several K blocks runs panel by panel, each through
/// every K block, instead of K block by K block over all panels. Block by block keeps
/// A's block in L2 while all of C is swept once per block: right when A is large (a
/// conv's 2.4 MB of 3×3×256 weights), but when C is the large one, C goes back and
/// forth to L3 (ViT's MLP, 197×256×1024: C 0.8 MB, A 0.2 MB). Panel by panel, one
/// panel of C stays in L1/L2 across the blocks, and all of A (≤ this) stays in L2.
/// Measured (`--bench gemm`, x86-64-v4, three alternating runs, `NNC_GEMM_ORDER`):
/// 256×256×1024 123–136 vs 79–128 GFLOP/s, 197×256×1024 even; no change measurable on
/// vit_tiny or minibert, whose GEMMs are bound elsewhere.
const PANELS_OUTER_MAX_A_BYTES: usize = 1 << 20;

/// ... and K blocks up to which it does: with many blocks, re-reading all of A for every
/// panel costs more than C's round trips. ResNet's 3×3×512 convs on 7×7 (transposed
/// GEMM, K = 4608 in 36 blocks, A 0.9 MB): 2.87 ms panel by panel, 2.67 block by block
/// (`benches/bench_conv.py 512 512 7 3 1 NNC_GEMM_ORDER=blocks`), resnet18 3% slower.
const PANELS_OUTER_MAX_BLOCKS: usize = 8;

/// Whether the kernel runs panels outermost (see [`PANELS_OUTER_MAX_A_BYTES`]);
/// `--kernel gemm-order=blocks|panels` forces one order, for measurements.
fn panels_outer(s: &GemmSpec) -> bool {
    let blocks = s.k.div_ceil(s.geometry.k_block_len(s.k));
    // Taps convs walk output rows in their own pass (`conv_pass`).
    let possible = blocks > 1 && !matches!(s.b, BLayout::Taps { .. });
    match s.geometry.order {
        GemmOrder::Blocks => false,
        GemmOrder::Panels => possible,
        GemmOrder::Auto => {
            possible
                && blocks <= PANELS_OUTER_MAX_BLOCKS
                && s.m * s.k * F32 <= PANELS_OUTER_MAX_A_BYTES
        }
    }
}

/// Whether the first row tile of each column panel prefetches the next panel's block of
/// packed B into L2 during its K loop. B is the constant weights, often streamed from L3
/// or memory exactly once; without this the first tile of each panel waits for its B
/// lines and the other tiles, which find them in L1, cannot hide that. Measured
/// (`bench_models.py --variant NNC_GEMM_PREFETCH=off`, alternating rounds): resnet18,
/// vit_tiny and minibert 3–4% faster; ResNet's 3×3×512 convs on 7×7 (9.4 MB of
/// weights) 2.79 → 2.52 ms alone. Only packed B is prefetched (activations read in
/// place did not gain). `--kernel gemm-prefetch=off` turns it off, for measurements.
fn prefetch_next_panel(s: &GemmSpec) -> bool {
    matches!(s.b, BLayout::Packed | BLayout::PackedBlocks) && s.geometry.prefetch
}

/// Addend base addresses: the first three arrive in registers and are saved to the
/// frame (freeing rcx, r8 and r9 for the loops), the rest are on the stack.
const ADDEND_REGS: [AsmRegister64; 3] = [rcx, r8, r9];
/// Frame bytes below the saved registers: the three addend registers, the end column
/// of the current output row's full panels (implicit-GEMM conv), for rows counted at
/// run time their number and the end of their full row tiles, and for columns counted
/// at run time their number and the end of their full panels.
const FRAME: usize = 64;
const PANEL_END_SLOT: i32 = 24;
const ROWS_SLOT: i32 = 32;
const FULL_ROWS_END_SLOT: i32 = 40;
const COLS_SLOT: i32 = 48;
const FULL_COLS_END_SLOT: i32 = 56;
/// The System V integer argument registers, in order.
const ARG_REGS: [AsmRegister64; 6] = [rdi, rsi, rdx, rcx, r8, r9];
/// Callee-saved registers the kernel uses, pushed in this order.
const SAVED: [AsmRegister64; 6] = [rbx, rbp, r12, r13, r14, r15];

/// How one tile's operands are addressed.
/// Which K block a pass over C computes, which decides its epilogue.
#[derive(Clone, Copy, PartialEq)]
enum Pass {
    /// K in one block: alpha, addends, activation, store.
    Only,
    /// First of several: store the scaled partial sum.
    First,
    /// Neither first nor last: add C, store.
    Middle,
    /// Last of several: add C, then addends and activation, store.
    Last,
}

#[derive(Clone, Copy)]
struct Block {
    pass: Pass,
    /// K steps in this block.
    steps: usize,
}

#[derive(Clone, Copy)]
struct TileShape {
    rows: usize,
    vecs: usize,
    /// Whether the tile's columns end inside its last vector (whose lanes the mask
    /// register holds).
    masked: bool,
    /// Floats per K step of this panel of packed B (its width).
    packed_b_width: usize,
    block: Block,
    /// Prefetch the next panel's B block into L2 during this tile's K loop.
    prefetch_next: bool,
}

/// One column panel of [`Emitter::columns`].
#[derive(Clone, Copy)]
struct Panel {
    vecs: usize,
    /// Whether its columns end inside the last vector (the mask register holds them).
    masked: bool,
    /// Floats per K step of its packed B.
    packed_b_width: usize,
}

struct Emitter<'s> {
    spec: &'s GemmSpec,
    v: Vecs,
    mr: usize,
    nr: usize,
    consts: Consts,
    masks: TailMasks,
    /// `GemmSpec::b_taps`, for [`BLayout::Taps`].
    taps_table: Option<CodeLabel>,
}

/// Encodes the kernel for `spec`. `spec` must satisfy [`supports`]; packed operands are
/// in the layouts of [`super::gemm::Geometry`] for `isa`.
pub fn emit(spec: &GemmSpec, isa: Vector) -> Result<Vec<u8>, String> {
    if !supports(spec) {
        return Err(format!("no x86 machine-code kernel for {spec:?}"));
    }
    let (mr, vecs) = isa.tile();
    let mut e = Emitter {
        spec,
        v: Vecs { isa },
        mr,
        nr: vecs * isa.lanes(),
        consts: Consts { values: vec![] },
        masks: TailMasks::default(),
        taps_table: None,
    };
    let mut a = CodeAssembler::new(64).map_err(|e| e.to_string())?;
    e.function(&mut a)
        .map_err(|e| format!("x86 GEMM kernel: {}", e.0))?;
    a.assemble(0).map_err(|e| format!("x86 GEMM kernel: {e}"))
}

impl Emitter<'_> {
    fn function(&mut self, a: &mut CodeAssembler) -> AsmResult<()> {
        let s = self.spec;
        for r in SAVED {
            a.push(r)?;
        }
        a.sub(rsp, FRAME as i32)?;
        for (n, r) in ADDEND_REGS.iter().enumerate() {
            a.mov(qword_ptr(rsp + (n * 8) as i32), *r)?;
        }
        let mut exit = a.create_label();
        if s.rows_at_run_time {
            self.count_rows(a, exit)?;
        }
        if s.cols_at_run_time {
            self.count_cols(a, exit)?;
        }
        if s.run_time_strides.any() {
            // r8 = the row stride in bytes (r8 is free but for tap convs).
            let arg = 3
                + s.addends.len()
                + usize::from(s.rows_at_run_time)
                + usize::from(s.cols_at_run_time);
            self.read_arg(a, r8, arg)?;
            a.shl(r8, 2)?;
            if s.run_time_strides == RunTimeStrides::AK {
                // r9 = three of A's rows, for addressing rows 3 and 7 (r9 is free but
                // for tap convs).
                a.lea(r9, r8 + r8 * 2)?;
            }
        }
        if s.m > 0 && s.n > 0 {
            if panels_outer(s) {
                self.panels_outer(a)?;
            } else {
                self.k_blocks(a, &mut |e, a, block| e.pass(a, block))?;
            }
        }
        a.set_label(&mut exit)?;
        a.add(rsp, FRAME as i32)?;
        for r in SAVED.iter().rev() {
            a.pop(*r)?;
        }
        a.vzeroupper()?;
        a.ret()?;
        self.data(a)
    }

    /// Reads the run-time row count (the argument after the addends) into the frame,
    /// with the end of its full row tiles; jumps to `exit` when it is 0.
    fn count_rows(&mut self, a: &mut CodeAssembler, exit: CodeLabel) -> AsmResult<()> {
        let arg = 3 + self.spec.addends.len();
        let (m, mr) = (self.spec.m, self.mr);
        self.read_count(a, arg, (m, mr), (ROWS_SLOT, FULL_ROWS_END_SLOT), exit)
    }

    /// Reads the run-time column count (the last argument) into the frame, with the end
    /// of its full panels; jumps to `exit` when it is 0.
    fn count_cols(&mut self, a: &mut CodeAssembler, exit: CodeLabel) -> AsmResult<()> {
        let s = self.spec;
        let arg = 3 + s.addends.len() + usize::from(s.rows_at_run_time);
        let (n, nr) = (s.n, self.nr);
        self.read_count(a, arg, (n, nr), (COLS_SLOT, FULL_COLS_END_SLOT), exit)
    }

    /// Argument `arg` into `reg`, from its register or the stack.
    fn read_arg(&self, a: &mut CodeAssembler, reg: AsmRegister64, arg: usize) -> AsmResult<()> {
        match ARG_REGS.get(arg) {
            Some(&r) => a.mov(reg, r)?,
            None => a.mov(
                reg,
                qword_ptr(rsp + imm(FRAME + (SAVED.len() + 1 + arg - ARG_REGS.len()) * 8)?),
            )?,
        }
        Ok(())
    }

    /// A count argument, at most `planned`, into frame slot `slot` and the end of its
    /// whole `tile`s into `end_slot`; jumps to `exit` when it is 0. Clobbers rax, r10
    /// and r11 (rdx, C's address, is restored).
    fn read_count(
        &mut self,
        a: &mut CodeAssembler,
        arg: usize,
        (planned, tile): (usize, usize),
        (slot, end_slot): (i32, i32),
        exit: CodeLabel,
    ) -> AsmResult<()> {
        self.read_arg(a, rax, arg)?;
        a.mov(r10, planned as u64)?;
        a.cmp(rax, r10)?;
        a.cmova(rax, r10)?;
        a.mov(qword_ptr(rsp + slot), rax)?;
        a.test(rax, rax)?;
        a.jz(exit)?;
        a.mov(r11, rdx)?;
        a.xor(edx, edx)?;
        a.mov(r10, tile as u64)?;
        a.div(r10)?;
        a.imul_3(rax, rax, imm(tile)?)?;
        a.mov(qword_ptr(rsp + end_slot), rax)?;
        a.mov(rdx, r11)?;
        Ok(())
    }

    /// Emits `body` for each column panel, rbp = its first column: the full panels in a
    /// loop, then the partial one, its width
    /// fixed by the spec or, for columns counted at run time, chosen among 1 to NR/lanes
    /// vectors by the count, the last vector's mask set from it.
    fn columns(
        &mut self,
        a: &mut CodeAssembler,
        body: &mut dyn FnMut(&mut Self, &mut CodeAssembler, Panel) -> AsmResult<()>,
    ) -> AsmResult<()> {
        let s = self.spec;
        let lanes = self.v.isa.lanes();
        let (_, vecs) = self.v.isa.tile();
        let nr = self.nr;
        a.xor(ebp, ebp)?;
        if s.cols_at_run_time {
            let mut tail = a.create_label();
            a.cmp(rbp, qword_ptr(rsp + FULL_COLS_END_SLOT))?;
            a.jae(tail)?;
            let mut top = a.create_label();
            a.set_label(&mut top)?;
            body(
                self,
                a,
                Panel {
                    vecs,
                    masked: false,
                    packed_b_width: nr,
                },
            )?;
            a.add(rbp, imm(nr)?)?;
            a.cmp(rbp, qword_ptr(rsp + FULL_COLS_END_SLOT))?;
            a.jb(top)?;
            a.set_label(&mut tail)?;
            let mut done = a.create_label();
            a.mov(rax, qword_ptr(rsp + COLS_SLOT))?;
            a.sub(rax, rbp)?;
            a.jz(done)?;
            for v in 1..=vecs {
                let mut wider = a.create_label();
                if v < vecs {
                    a.cmp(rax, imm(v * lanes)?)?;
                    a.ja(wider)?;
                }
                a.sub(rax, imm((v - 1) * lanes)?)?;
                self.masks
                    .set_counted(a, self.v.isa, k1, AVX2_MASK, rax, r13)?;
                body(
                    self,
                    a,
                    Panel {
                        vecs: v,
                        masked: true,
                        packed_b_width: v * lanes,
                    },
                )?;
                if v < vecs {
                    a.jmp(done)?;
                    a.set_label(&mut wider)?;
                }
            }
            a.set_label(&mut done)?;
            // The code after may open with a label of its own.
            a.nop()?;
            return Ok(());
        }
        let (full_panels, rem) = (s.n / nr, s.n % nr);
        if full_panels > 0 {
            let mut top = a.create_label();
            a.set_label(&mut top)?;
            body(
                self,
                a,
                Panel {
                    vecs,
                    masked: false,
                    packed_b_width: nr,
                },
            )?;
            a.add(rbp, imm(nr)?)?;
            a.cmp(rbp, imm(full_panels * nr)?)?;
            a.jb(top)?;
        }
        if rem > 0 {
            let vecs = rem.div_ceil(lanes);
            let masked = !rem.is_multiple_of(lanes);
            if masked {
                self.set_mask(a, rem % lanes)?;
            }
            body(
                self,
                a,
                Panel {
                    vecs,
                    masked,
                    packed_b_width: vecs * lanes,
                },
            )?;
        }
        Ok(())
    }

    /// Emits `body` for each K block in turn, r15 = the block's first K step: the same
    /// blocks as the packed operands (`Geometry::k_block_len`).
    fn k_blocks(
        &mut self,
        a: &mut CodeAssembler,
        body: &mut dyn FnMut(&mut Self, &mut CodeAssembler, Block) -> AsmResult<()>,
    ) -> AsmResult<()> {
        let k = self.spec.k;
        let kc = self.spec.geometry.k_block_len(k);
        a.xor(r15d, r15d)?;
        if k <= kc || self.spec.run_time_strides == RunTimeStrides::AK {
            return body(
                self,
                a,
                Block {
                    pass: Pass::Only,
                    steps: k,
                },
            );
        }
        let full = k / kc;
        let rem = k % kc;
        let middle = if rem == 0 { full - 2 } else { full - 1 };
        body(
            self,
            a,
            Block {
                pass: Pass::First,
                steps: kc,
            },
        )?;
        a.mov(r15, kc as u64)?;
        if middle > 0 {
            let mut top = a.create_label();
            a.set_label(&mut top)?;
            body(
                self,
                a,
                Block {
                    pass: Pass::Middle,
                    steps: kc,
                },
            )?;
            a.add(r15, imm(kc)?)?;
            a.cmp(r15, imm((middle + 1) * kc)?)?;
            a.jb(top)?;
        }
        let steps = if rem == 0 { kc } else { rem };
        body(
            self,
            a,
            Block {
                pass: Pass::Last,
                steps,
            },
        )
    }

    /// Column panel after column panel, each through every K block (see
    /// [`panels_outer`]); rbp = the panel's first column.
    fn panels_outer(&mut self, a: &mut CodeAssembler) -> AsmResult<()> {
        self.columns(a, &mut |e, a, p| {
            e.k_blocks(a, &mut |e, a, block| {
                e.row_tiles(a, block, p.vecs, p.masked, p.packed_b_width)
            })
        })
    }

    /// All tiles of C for the K steps `r15 .. r15 + block.steps`.
    fn pass(&mut self, a: &mut CodeAssembler, block: Block) -> AsmResult<()> {
        if let BLayout::Taps {
            out_w,
            out_h,
            row_step,
        } = self.spec.b
        {
            return self.conv_pass(a, block, out_w, out_h, row_step);
        }
        self.columns(a, &mut |e, a, p| {
            e.row_tiles(a, block, p.vecs, p.masked, p.packed_b_width)
        })
    }

    /// [`Pass`] over an implicit-GEMM conv: output row by output row (rcx counts them,
    /// r8 = B column − C column in elements), panels within each row, so that a
    /// panel's K rows are contiguous runs of the input.
    fn conv_pass(
        &mut self,
        a: &mut CodeAssembler,
        block: Block,
        out_w: usize,
        out_h: usize,
        row_step: usize,
    ) -> AsmResult<()> {
        let lanes = self.v.isa.lanes();
        let full_panels = out_w / self.nr;
        let rem = out_w % self.nr;
        a.xor(ebp, ebp)?;
        a.xor(r8d, r8d)?;
        a.mov(rcx, out_h as u64)?;
        let mut row_top = a.create_label();
        a.set_label(&mut row_top)?;
        if full_panels > 0 {
            a.lea(rax, rbp + imm(full_panels * self.nr)?)?;
            a.mov(qword_ptr(rsp + PANEL_END_SLOT), rax)?;
            let mut top = a.create_label();
            a.set_label(&mut top)?;
            let (_, vecs) = self.v.isa.tile();
            self.row_tiles(a, block, vecs, false, self.nr)?;
            a.add(rbp, imm(self.nr)?)?;
            a.cmp(rbp, qword_ptr(rsp + PANEL_END_SLOT))?;
            a.jb(top)?;
        }
        if rem > 0 {
            let vecs = rem.div_ceil(lanes);
            let masked = !rem.is_multiple_of(lanes);
            if masked {
                self.set_mask(a, rem % lanes)?;
            }
            self.row_tiles(a, block, vecs, masked, vecs * lanes)?;
            a.add(rbp, imm(rem)?)?;
        }
        a.add(r8, imm(row_step - out_w)?)?;
        a.dec(rcx)?;
        a.jnz(row_top)?;
        Ok(())
    }

    fn set_mask(&mut self, a: &mut CodeAssembler, lanes: usize) -> AsmResult<()> {
        self.masks.set(a, self.v.isa, k1, AVX2_MASK, lanes)
    }

    /// The row tiles of one column panel (`rbp` = its first column).
    fn row_tiles(
        &mut self,
        a: &mut CodeAssembler,
        block: Block,
        vecs: usize,
        masked: bool,
        packed_b_width: usize,
    ) -> AsmResult<()> {
        let s = self.spec;
        let full_rows = s.m / self.mr;
        let rem_rows = s.m % self.mr;
        let full = TileShape {
            rows: self.mr,
            vecs,
            masked,
            packed_b_width,
            block,
            prefetch_next: false,
        };
        a.xor(ebx, ebx)?;
        if s.rows_at_run_time {
            return self.counted_row_tiles(a, full);
        }
        // The first full tile, peeled off the loop, is the one that prefetches.
        let peel = full_rows > 1 && prefetch_next_panel(s);
        if peel {
            self.tile(
                a,
                TileShape {
                    prefetch_next: true,
                    ..full
                },
            )?;
            a.add(rbx, imm(self.mr)?)?;
        }
        if full_rows > usize::from(peel) {
            let mut top = a.create_label();
            a.set_label(&mut top)?;
            self.tile(a, full)?;
            a.add(rbx, imm(self.mr)?)?;
            a.cmp(rbx, imm(full_rows * self.mr)?)?;
            a.jb(top)?;
        }
        if rem_rows > 0 {
            self.tile(
                a,
                TileShape {
                    rows: rem_rows,
                    ..full
                },
            )?;
        }
        Ok(())
    }

    /// [`Self::row_tiles`] for the row count in the frame: full tiles up to the end
    /// the frame holds, then the 1 to MR−1 rows left as tiles of 4, 2 and 1 rows (three
    /// copies of the tile code rather than MR−1; each reads the panel once more).
    fn counted_row_tiles(&mut self, a: &mut CodeAssembler, full: TileShape) -> AsmResult<()> {
        let mut tail = a.create_label();
        a.cmp(rbx, qword_ptr(rsp + FULL_ROWS_END_SLOT))?;
        a.jae(tail)?;
        let mut top = a.create_label();
        a.set_label(&mut top)?;
        self.tile(a, full)?;
        a.add(rbx, imm(self.mr)?)?;
        a.cmp(rbx, qword_ptr(rsp + FULL_ROWS_END_SLOT))?;
        a.jb(top)?;
        a.set_label(&mut tail)?;
        let mr = self.mr;
        for rows in [4, 2, 1].into_iter().filter(|&r| r < mr) {
            let mut skip = a.create_label();
            a.mov(rax, qword_ptr(rsp + ROWS_SLOT))?;
            a.sub(rax, rbx)?;
            a.test(rax, imm(rows)?)?;
            a.jz(skip)?;
            self.tile(a, TileShape { rows, ..full })?;
            a.add(rbx, imm(rows)?)?;
            a.set_label(&mut skip)?;
        }
        // The code after may open with a label of its own (one per instruction).
        a.nop()?;
        Ok(())
    }

    fn acc(&self, t: &TileShape, i: usize, v: usize) -> usize {
        i * t.vecs + v
    }

    /// Register numbers of B's vectors and of the A broadcasts.
    fn b_reg(&self, v: usize) -> usize {
        let (mr, vecs) = self.v.isa.tile();
        mr * vecs + v
    }

    fn bcast_reg(&self, i: usize) -> usize {
        let (mr, vecs) = self.v.isa.tile();
        match self.v.isa {
            Vector::Zmm => mr * vecs + vecs + (i % 2),
            Vector::Ymm => mr * vecs + vecs,
        }
    }

    /// One `rows × vecs` tile at rows `rbx..`, columns `rbp..`.
    fn tile(&mut self, a: &mut CodeAssembler, t: TileShape) -> AsmResult<()> {
        let s = self.spec;
        // r10 = A tile, r11 = B panel.
        let (a_row_bytes, a_tile_stride, a_k_bytes) = match s.a {
            // Element (i, k) at (i·rs + k·cs)·4.
            ALayout::Strided {
                row_stride,
                col_stride,
            } => (row_stride * F32, row_stride * F32, col_stride * F32),
            // K block by K block (see `gemm::pack_a`): the tile of `rows` rows of the
            // block starting at step kb, `len` steps long, is at element kb·M + i0·len,
            // laid out [k][rows].
            ALayout::Packed => (F32, t.block.steps * F32, t.rows * F32),
        };
        let taps = matches!(s.b, BLayout::Taps { .. });
        let (b_panel_stride, b_k_bytes, b_masked) = match s.b {
            BLayout::Packed => (s.k * F32, t.packed_b_width * F32, false),
            // Panel p of the current K block: columns p·nr .. at block start + p·nr·steps.
            BLayout::PackedBlocks => (t.block.steps * F32, t.packed_b_width * F32, false),
            BLayout::Rows { row_stride } => (F32, row_stride * F32, t.masked),
            // Per-step offsets come from the table (r9); a tail may end past the input.
            BLayout::Taps { .. } => (F32, 0, t.masked),
            BLayout::Gather { .. } => unreachable!("excluded by supports()"),
        };
        let run_k = s.run_time_strides == RunTimeStrides::AK;
        if run_k {
            // Rows the run's K apart; r14 = the tile's fifth row.
            a.mov(r10, rbx)?;
            a.imul_2(r10, r8)?;
            a.add(r10, rdi)?;
            if t.rows > 4 {
                a.lea(r14, r10 + r8 * 4)?;
            }
        } else {
            a.imul_3(r10, rbx, imm(a_tile_stride)?)?;
            a.add(r10, rdi)?;
        }
        if taps {
            a.lea(r11, rbp + r8)?;
            a.lea(r11, rsi + r11 * 4)?;
            let table = *self.taps_table.get_or_insert_with(|| a.create_label());
            a.lea(r9, ptr(table))?;
            a.lea(r9, r9 + r15 * 4)?;
        } else {
            a.imul_3(r11, rbp, imm(b_panel_stride)?)?;
            a.add(r11, rsi)?;
        }
        if t.block.pass != Pass::Only {
            // Move both to the block's first K step (r15).
            let a_block_bytes = match s.a {
                ALayout::Packed => s.m * F32,
                ALayout::Strided { .. } => a_k_bytes,
            };
            a.imul_3(r14, r15, imm(a_block_bytes)?)?;
            a.add(r10, r14)?;
            // K step r15 starts at row r15 of a whole-K panel, or at the block of all
            // panels at r15·W.
            let b_block_bytes = match s.b {
                BLayout::PackedBlocks => {
                    crate::codegen::kernels::gemm::packed_b_len(&s.geometry, 1, s.n) * F32
                }
                _ => b_k_bytes,
            };
            if s.run_time_strides.b() {
                a.mov(r14, r15)?;
                a.imul_2(r14, r8)?;
                a.add(r11, r14)?;
            } else if !taps {
                a.imul_3(r14, r15, imm(b_block_bytes)?)?;
                a.add(r11, r14)?;
            }
        }
        let splits = self.k_splits(&t);
        let chains = t.rows * t.vecs;
        for r in 0..chains * splits {
            self.v.zero(a, r)?;
        }
        // The next panel's B starts one panel stride on (a whole-K panel, or the
        // panel's slice of this K block).
        let prefetch = t.prefetch_next.then_some(b_panel_stride * self.nr);
        let step = |e: &mut Self, a: &mut CodeAssembler, u: usize| -> AsmResult<()> {
            // K step u accumulates into set u mod splits (set 0 = the tile's registers).
            let set = (u % splits) * chains;
            if taps {
                a.movsxd(r14, dword_ptr(r9 + imm(u * 4)?))?;
            }
            if let Some(next) = prefetch {
                let row = next + u * b_k_bytes;
                for line in (0..t.vecs * e.v.bytes() as usize).step_by(64) {
                    a.prefetcht1(byte_ptr(r11 + imm(row + line)?))?;
                }
            }
            // With strides at run time r11 walks B's rows, one add per step.
            let b_step = match s.run_time_strides.b() {
                true => 0,
                false => u * b_k_bytes,
            };
            for v in 0..t.vecs {
                let masked = b_masked && v + 1 == t.vecs;
                let off = imm(b_step + v * e.v.bytes() as usize)?;
                let at = if taps { r11 + r14 + off } else { r11 + off };
                e.v.load(a, e.b_reg(v), at, masked)?;
            }
            if s.run_time_strides.b() {
                a.add(r11, r8)?;
            }
            for i in 0..t.rows {
                let bc = e.bcast_reg(i);
                if run_k {
                    // Row i at r10 (rows 0–3) or r14 (rows 4–7) plus 0, 1, 2 or 3 rows.
                    let base = if i < 4 { r10 } else { r14 };
                    let off = imm(u * a_k_bytes)?;
                    let at = match i % 4 {
                        0 => base + off,
                        1 => base + r8 + off,
                        2 => base + r8 * 2 + off,
                        _ => base + r9 + off,
                    };
                    e.v.broadcast(a, bc, at)?;
                } else {
                    let off = imm(i * a_row_bytes + u * a_k_bytes)?;
                    e.v.broadcast(a, bc, r10 + off)?;
                }
                for v in 0..t.vecs {
                    e.v.fma(a, set + e.acc(&t, i, v), e.b_reg(v), bc)?;
                }
            }
            Ok(())
        };
        if run_k {
            // K/4 groups of four steps (r8 = K·4 bytes), then K mod 4 single steps.
            let (mut rest, mut done) = (a.create_label(), a.create_label());
            let advance = |a: &mut CodeAssembler, steps: usize| -> AsmResult<()> {
                a.add(r10, imm(steps * a_k_bytes)?)?;
                if t.rows > 4 {
                    a.add(r14, imm(steps * a_k_bytes)?)?;
                }
                a.add(r11, imm(steps * b_k_bytes)?)?;
                Ok(())
            };
            a.mov(rax, r8)?;
            a.shr(rax, 4)?;
            a.jz(rest)?;
            let mut top = a.create_label();
            a.set_label(&mut top)?;
            for u in 0..K_UNROLL {
                step(self, a, u)?;
            }
            advance(a, K_UNROLL)?;
            a.dec(rax)?;
            a.jnz(top)?;
            a.set_label(&mut rest)?;
            a.mov(rax, r8)?;
            a.shr(rax, 2)?;
            a.and(eax, 3)?;
            a.jz(done)?;
            let mut one = a.create_label();
            a.set_label(&mut one)?;
            step(self, a, 0)?;
            advance(a, 1)?;
            a.dec(rax)?;
            a.jnz(one)?;
            a.set_label(&mut done)?;
        }
        let steps = if run_k { 0 } else { t.block.steps };
        let loops = steps / K_UNROLL;
        if loops > 0 {
            a.mov(rax, loops as u64)?;
            let mut top = a.create_label();
            a.set_label(&mut top)?;
            for u in 0..K_UNROLL {
                step(self, a, u)?;
            }
            a.add(r10, imm(K_UNROLL * a_k_bytes)?)?;
            if taps {
                a.add(r9, imm(K_UNROLL * 4)?)?;
            } else if !s.run_time_strides.b() {
                a.add(r11, imm(K_UNROLL * b_k_bytes)?)?;
            }
            a.dec(rax)?;
            a.jnz(top)?;
        }
        for u in 0..steps % K_UNROLL {
            step(self, a, u)?;
        }
        // Fold the sets pairwise into set 0.
        let mut sets = splits;
        while sets > 1 {
            sets /= 2;
            for r in 0..chains * sets {
                self.v.op(a, VOp::Add, r, r, r + chains * sets)?;
            }
        }
        self.epilogue(a, &t)
    }

    /// Independent accumulator sets for a tile's K loop. A tile of few accumulators
    /// (a GEMV row: 1 × 3 vectors) is bound by the FMA latency, one dependent chain
    /// per accumulator, not by the FMA ports: 2 ports × 4 cycles want 8 chains in
    /// flight. Such tiles spread their K steps over 2 or 4 sets of accumulators, taken
    /// from the registers the full tile would use, and add them up after the loop
    /// (digits_cnn's 512→64 Gemm on one row; figures in BENCHMARKS.md's history, git).
    fn k_splits(&self, t: &TileShape) -> usize {
        const FMA_CHAINS: usize = 8;
        let (mr, vecs) = self.v.isa.tile();
        let chains = t.rows * t.vecs;
        let mut splits = 1;
        while splits < K_UNROLL && chains * splits < FMA_CHAINS && chains * splits * 2 <= mr * vecs
        {
            splits *= 2;
        }
        splits
    }

    fn epilogue(&mut self, a: &mut CodeAssembler, t: &TileShape) -> AsmResult<()> {
        let s = self.spec;
        let vb = self.v.bytes() as usize;
        let (mr, vecs) = self.v.isa.tile();
        // Registers free after the K loop: B's, the broadcasts' (and on AVX-512 more).
        let tmp = mr * vecs;
        let scale_reg = tmp + 1;
        // r12 = C tile = C + (rbx·ldc + rbp)·4.
        if s.run_time_strides.c() {
            a.mov(r12, rbx)?;
            a.imul_2(r12, r8)?;
        } else {
            a.imul_3(r12, rbx, imm(s.ldc * F32)?)?;
        }
        a.add(r12, rdx)?;
        a.lea(r12, r12 + rbp * 4)?;
        if s.alpha != 1.0 {
            let c = self.consts.get(a, s.alpha);
            for i in 0..t.rows {
                for v in 0..t.vecs {
                    let r = self.acc(t, i, v);
                    self.v.op_mem(a, VOp::Mul, r, r, c)?;
                }
            }
        }
        let pass = t.block.pass;
        if matches!(pass, Pass::Middle | Pass::Last) {
            // The earlier blocks' sum, stored in C.
            for i in 0..t.rows {
                let (row, at) = self.row_at(a, r12, rax, i, s.ldc * F32)?;
                for v in 0..t.vecs {
                    let masked = t.masked && v + 1 == t.vecs;
                    let r = self.acc(t, i, v);
                    self.v.load(a, tmp, row + imm(at + v * vb)?, masked)?;
                    self.v.op(a, VOp::Add, r, r, tmp)?;
                }
            }
        }
        if matches!(pass, Pass::Only | Pass::Last) {
            for (n, ad) in s.addends.iter().enumerate() {
                self.addend(a, t, n, ad, tmp, scale_reg)?;
            }
            self.activation(a, t, tmp)?;
        }
        for i in 0..t.rows {
            let (row, at) = self.row_at(a, r12, rax, i, s.ldc * F32)?;
            for v in 0..t.vecs {
                let masked = t.masked && v + 1 == t.vecs;
                self.v
                    .store(a, row + imm(at + v * vb)?, self.acc(t, i, v), masked)?;
            }
        }
        Ok(())
    }

    /// Where row `i` of a matrix whose row 0 is at `base` starts: `base` and
    /// `i·stride_bytes`, or with strides at run time `walker` (set to `base` at row 0,
    /// advanced by r8 at each next row, so rows must come in order) and 0.
    fn row_at(
        &self,
        a: &mut CodeAssembler,
        base: AsmRegister64,
        walker: AsmRegister64,
        i: usize,
        stride_bytes: usize,
    ) -> AsmResult<(AsmRegister64, usize)> {
        if !self.spec.run_time_strides.c() {
            return Ok((base, i * stride_bytes));
        }
        match i {
            0 => a.mov(walker, base)?,
            _ => a.add(walker, r8)?,
        }
        Ok((walker, 0))
    }

    /// `acc += scale · T[i·row_stride + j·col_stride]` with r13 = T's tile address.
    fn addend(
        &mut self,
        a: &mut CodeAssembler,
        t: &TileShape,
        n: usize,
        ad: &Addend,
        tmp: usize,
        scale_reg: usize,
    ) -> AsmResult<()> {
        let vb = self.v.bytes() as usize;
        match ADDEND_REGS.get(n) {
            Some(_) => a.mov(r13, qword_ptr(rsp + (n * 8) as i32))?,
            // Stack arguments sit above the return address and the saved registers.
            None => a.mov(
                r13,
                qword_ptr(rsp + imm(FRAME + (SAVED.len() + 1 + n - ADDEND_REGS.len()) * 8)?),
            )?,
        }
        // Per-column addends take the run's row stride, like C.
        let run_time_rows = self.spec.run_time_strides.c() && ad.col_stride == 1;
        if run_time_rows {
            a.mov(r14, rbx)?;
            a.imul_2(r14, r8)?;
        } else {
            a.imul_3(r14, rbx, imm(ad.row_stride * F32)?)?;
        }
        a.add(r13, r14)?;
        if ad.col_stride == 1 {
            a.lea(r13, r13 + rbp * 4)?;
        }
        let scaled = ad.scale != 1.0;
        if scaled {
            let c = self.consts.get(a, ad.scale);
            self.v.load(a, scale_reg, c, false)?;
        }
        for i in 0..t.rows {
            let (base, row) = match run_time_rows {
                true => self.row_at(a, r13, r14, i, 0)?,
                false => (r13, i * ad.row_stride * F32),
            };
            if ad.col_stride == 0 {
                self.v.broadcast(a, tmp, base + imm(row)?)?;
            }
            for v in 0..t.vecs {
                let r = self.acc(t, i, v);
                if ad.col_stride == 1 {
                    let masked = t.masked && v + 1 == t.vecs;
                    self.v.load(a, tmp, base + imm(row + v * vb)?, masked)?;
                }
                if scaled {
                    self.v.fma(a, r, tmp, scale_reg)?;
                } else {
                    self.v.op(a, VOp::Add, r, r, tmp)?;
                }
            }
        }
        Ok(())
    }

    fn activation(&mut self, a: &mut CodeAssembler, t: &TileShape, tmp: usize) -> AsmResult<()> {
        let regs: Vec<usize> = (0..t.rows)
            .flat_map(|i| (0..t.vecs).map(move |v| (i, v)))
            .map(|(i, v)| self.acc(t, i, v))
            .collect();
        activate(
            a,
            &self.v,
            &mut self.consts,
            self.spec.activation,
            &regs,
            // Free after the K loop: B's registers and the broadcasts'.
            &[tmp, tmp + 1, tmp + 2],
        )
    }

    /// Constant vectors and the AVX2 mask table, after the code.
    fn data(&mut self, a: &mut CodeAssembler) -> AsmResult<()> {
        emit_consts(a, &mut self.consts, self.v.isa.lanes())?;
        if let Some(mut l) = self.taps_table.take() {
            a.set_label(&mut l)?;
            let t: Vec<u32> = self.spec.b_taps.iter().map(|&x| x as u32).collect();
            a.dd(&t)?;
        }
        self.masks.emit_table(a)
    }
}
