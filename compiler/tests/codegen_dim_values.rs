//! `nnc::codegen::dim_values`: dimension expressions compiled to machine code (JIT, the
//! host ISA) and evaluated at random values of their symbols, against
//! `Dim::eval` — the run's extents must be exactly what the compiler's expressions
//! say. Divisors below 1 must raise the flag, never trap.

use cranelift_codegen::ir::{
    types, AbiParam, Function, InstBuilder, MemFlagsData, Signature, UserFuncName,
};
use cranelift_codegen::settings::{self, Configurable};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{default_libcall_names, Linkage, Module};
use nnc::codegen::dim_values::DimEmitter;
use nnc::ir::dim::text::parse;
use nnc::ir::{Dim, SymbolId};

/// `fn(symbols: *const i64, flag: *mut i8) -> i64` computing `d`.
struct Compiled {
    _module: JITModule,
    code: *const u8,
}

impl Compiled {
    fn new(d: &Dim) -> Compiled {
        let mut flags = settings::builder();
        flags.set("opt_level", "speed").unwrap();
        let isa = cranelift_native::builder()
            .expect("host ISA")
            .finish(settings::Flags::new(flags))
            .unwrap();
        let ptr = isa.pointer_type();
        let mut sig = Signature::new(isa.default_call_conv());
        sig.params.push(AbiParam::new(ptr));
        sig.params.push(AbiParam::new(ptr));
        sig.returns.push(AbiParam::new(types::I64));
        let mut func = Function::with_name_signature(UserFuncName::user(0, 0), sig);
        let mut fctx = FunctionBuilderContext::new();
        let mut b = FunctionBuilder::new(&mut func, &mut fctx);
        let entry = b.create_block();
        b.append_block_params_for_function_params(entry);
        b.switch_to_block(entry);
        let (symbols, flag) = (b.block_params(entry)[0], b.block_params(entry)[1]);
        let mut load = |b: &mut FunctionBuilder, s: SymbolId| {
            b.ins()
                .load(types::I64, MemFlagsData::new(), symbols, 8 * s.0 as i32)
        };
        let mut e = DimEmitter::new(&mut load);
        let v = e.emit(&mut b, d);
        let bad = e
            .bad_divisor
            .unwrap_or_else(|| b.ins().iconst(types::I8, 0));
        b.ins().store(MemFlagsData::new(), bad, flag, 0);
        b.ins().return_(&[v]);
        b.seal_all_blocks();
        b.finalize(isa.frontend_config());
        let mut module = JITModule::new(JITBuilder::with_isa(isa, default_libcall_names()));
        let id = module
            .declare_function("dim", Linkage::Local, &func.signature)
            .unwrap();
        let mut ctx = module.make_context();
        ctx.func = func;
        module.define_function(id, &mut ctx).unwrap();
        module.finalize_definitions().unwrap();
        let code = module.get_finalized_function(id);
        Compiled {
            _module: module,
            code,
        }
    }

    /// The value and whether a divisor fell below 1.
    fn run(&self, symbols: &[i64]) -> (i64, bool) {
        let f: extern "C" fn(*const i64, *mut i8) -> i64 =
            unsafe { std::mem::transmute(self.code) };
        let mut flag = 0i8;
        let v = f(symbols.as_ptr(), &mut flag);
        (v, flag != 0)
    }
}

struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }

    /// Expression text over `a`, `b`, `c` (each ≥ 1) whose divisors are positive: a
    /// constant, a symbol, or a symbol plus a constant.
    fn expr(&mut self, depth: u32) -> String {
        if depth == 0 || self.below(4) == 0 {
            return match self.below(3) {
                0 => (self.below(9) as i64 - 3).to_string(),
                _ => ["a", "b", "c"][self.below(3) as usize].to_string(),
            };
        }
        let (x, y) = (self.expr(depth - 1), self.expr(depth - 1));
        let divisor = match self.below(3) {
            0 => (self.below(7) + 1).to_string(),
            1 => ["a", "b", "c"][self.below(3) as usize].to_string(),
            _ => format!(
                "({} + {})",
                ["a", "b", "c"][self.below(3) as usize],
                self.below(4)
            ),
        };
        match self.below(6) {
            0 => format!("({x} + {y})"),
            1 => format!("({x} - {y})"),
            2 => format!("({x} * {y})"),
            3 => format!("({x}) / {divisor}"),
            4 => format!("min({x}, {y})"),
            _ => format!("max({x}, {y})"),
        }
    }
}

fn resolve(n: &str) -> Option<SymbolId> {
    ["a", "b", "c"]
        .iter()
        .position(|x| *x == n)
        .map(|i| SymbolId(i as u32))
}

#[test]
fn compiled_expressions_equal_the_compilers() {
    let mut rng = Rng(0x2545f4914f6cdd1d);
    let mut checked = 0;
    for _ in 0..400 {
        let text = rng.expr(4);
        let Ok(d) = parse(&text, &mut resolve) else {
            continue;
        };
        let f = Compiled::new(&d);
        for _ in 0..50 {
            let v: Vec<i64> = (0..3).map(|_| 1 + rng.below(60) as i64).collect();
            let Some(want) = d.eval_at(&v) else { continue };
            let (got, bad) = f.run(&v);
            assert!(!bad, "{text} at {v:?}: no divisor here is below 1");
            assert_eq!(got, want, "{text} = {d:?} at {v:?}");
            checked += 1;
        }
    }
    assert!(checked > 15_000, "only {checked} evaluations");
}

#[test]
fn a_divisor_below_one_raises_the_flag() {
    let d = parse("c/(a - 1) + (b - 9)/4", &mut resolve).unwrap();
    let f = Compiled::new(&d);
    assert_eq!(f.run(&[3, 1, 10]), (5 - 2, false));
    // a = 1: the divisor is 0; the run sees the flag, nothing traps.
    let (_, bad) = f.run(&[1, 1, 10]);
    assert!(bad);
    let (_, bad) = f.run(&[0, 1, 10]);
    assert!(bad);
    // Rounding toward −∞ for a negative numerator: ⌊(2 − 9)/4⌋ = −2.
    assert_eq!(f.run(&[2, 2, 0]), (-2, false));
}
