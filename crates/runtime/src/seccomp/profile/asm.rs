//! Code generation: a compiled profile as classic BPF, with symbolic
//! labels resolved.

use super::super::stmt;
use super::*;

/// An instruction with symbolic jumps. Every conditional jump is emitted
/// as a short test that skips a `BPF_JA` (whose offset has 32 bits), so
/// programs of any size (within the kernel's 4096) assemble.
enum Ins {
    Op(libc::sock_filter),
    /// Jump to the label if the test on the accumulator holds.
    If(Test, u32, usize),
    Mark(usize),
}

#[derive(Clone, Copy)]
enum Test {
    Eq,
    Ne,
    Gt,
    Ge,
    Lt,
    Le,
}

struct Asm {
    items: Vec<Ins>,
    labels: usize,
}

const OFF_NR: u32 = 0;
const OFF_ARCH: u32 = 4;
fn off_arg(index: u32, high: bool) -> u32 {
    // Little-endian `u64 args[6]` from offset 16.
    16 + 8 * index + if high { 4 } else { 0 }
}

impl Asm {
    fn label(&mut self) -> usize {
        self.labels += 1;
        self.labels
    }
    fn load(&mut self, off: u32) {
        self.items.push(Ins::Op(stmt(
            libc::BPF_LD | libc::BPF_W | libc::BPF_ABS,
            off,
        )));
    }
    fn and(&mut self, k: u32) {
        self.items.push(Ins::Op(stmt(
            libc::BPF_ALU | libc::BPF_AND | libc::BPF_K,
            k,
        )));
    }
    fn ret(&mut self, a: Action) {
        self.items
            .push(Ins::Op(stmt(libc::BPF_RET | libc::BPF_K, a.0)));
    }
    fn jump_if(&mut self, t: Test, k: u32, to: usize) {
        self.items.push(Ins::If(t, k, to));
    }
    fn mark(&mut self, l: usize) {
        self.items.push(Ins::Mark(l));
    }

    /// Jumps to `fail` unless condition `c` holds.
    fn cond(&mut self, c: &Cond, fail: usize) {
        let (hi, lo) = ((c.value >> 32) as u32, c.value as u32);
        let ok = self.label();
        match c.op {
            Op::Eq => {
                self.load(off_arg(c.index, true));
                self.jump_if(Test::Ne, hi, fail);
                self.load(off_arg(c.index, false));
                self.jump_if(Test::Ne, lo, fail);
            }
            Op::MaskedEq => {
                let (dhi, dlo) = ((c.value_two >> 32) as u32, c.value_two as u32);
                self.load(off_arg(c.index, true));
                self.and(hi);
                self.jump_if(Test::Ne, dhi, fail);
                self.load(off_arg(c.index, false));
                self.and(lo);
                self.jump_if(Test::Ne, dlo, fail);
            }
            Op::Ne => {
                self.load(off_arg(c.index, true));
                self.jump_if(Test::Ne, hi, ok);
                self.load(off_arg(c.index, false));
                self.jump_if(Test::Eq, lo, fail);
            }
            // The high words decide unless equal; then the low words.
            Op::Gt | Op::Ge | Op::Lt | Op::Le => {
                let (win, lose, low_fail) = match c.op {
                    Op::Gt => (Test::Gt, Test::Lt, Test::Le),
                    Op::Ge => (Test::Gt, Test::Lt, Test::Lt),
                    Op::Lt => (Test::Lt, Test::Gt, Test::Ge),
                    _ => (Test::Lt, Test::Gt, Test::Gt),
                };
                self.load(off_arg(c.index, true));
                self.jump_if(win, hi, ok);
                self.jump_if(lose, hi, fail);
                self.load(off_arg(c.index, false));
                self.jump_if(low_fail, lo, fail);
            }
        }
        self.mark(ok);
    }

    /// The rules of one table: dispatch on the number in the accumulator.
    fn table(&mut self, rules: &BTreeMap<u32, Vec<Rule>>, default: Action) {
        let blocks: Vec<(u32, usize)> = rules.keys().map(|nr| (*nr, self.label())).collect();
        for (nr, l) in &blocks {
            self.jump_if(Test::Eq, *nr, *l);
        }
        self.ret(default);
        for ((_, l), rs) in blocks.iter().zip(rules.values()) {
            self.mark(*l);
            for r in rs {
                let next = self.label();
                for c in &r.conds {
                    self.cond(c, next);
                }
                self.ret(r.action);
                self.mark(next);
            }
            self.ret(default);
        }
    }

    fn assemble(self) -> Vec<libc::sock_filter> {
        use libc::{BPF_JA, BPF_JEQ, BPF_JGE, BPF_JGT, BPF_JMP, BPF_K};
        let size = |i: &Ins| match i {
            Ins::Op(_) => 1,
            Ins::If(..) => 2,
            Ins::Mark(_) => 0,
        };
        let mut at = vec![0usize; self.labels + 1];
        let mut n = 0;
        for i in &self.items {
            if let Ins::Mark(l) = i {
                at[*l] = n;
            }
            n += size(i);
        }
        let mut out = Vec::with_capacity(n);
        let ja =
            |from: usize, to: usize| stmt(BPF_JMP | BPF_JA, to.saturating_sub(from + 1) as u32);
        for i in &self.items {
            match i {
                Ins::Op(f) => out.push(*f),
                Ins::Mark(_) => {}
                Ins::If(t, k, l) => {
                    // `jt`/`jf` of 0 and 1: fall through, or skip the JA.
                    let (code, take_on_true) = match t {
                        Test::Eq => (BPF_JEQ, true),
                        Test::Ne => (BPF_JEQ, false),
                        Test::Gt => (BPF_JGT, true),
                        Test::Le => (BPF_JGT, false),
                        Test::Ge => (BPF_JGE, true),
                        Test::Lt => (BPF_JGE, false),
                    };
                    let (jt, jf) = if take_on_true { (0, 1) } else { (1, 0) };
                    out.push(libc::sock_filter {
                        code: (BPF_JMP | code | BPF_K) as u16,
                        jt,
                        jf,
                        k: *k,
                    });
                    out.push(ja(out.len(), at[*l]));
                }
            }
        }
        out
    }
}

pub(super) fn emit(c: &Compiled) -> Vec<libc::sock_filter> {
    use super::super::arch;
    let mut a = Asm {
        items: Vec::new(),
        labels: 0,
    };
    let eperm = Action(libc::SECCOMP_RET_ERRNO | libc::EPERM as u32);
    let native = a.label();
    let compat = a.label();
    let refuse = a.label();
    a.load(OFF_ARCH);
    a.jump_if(Test::Eq, arch::NATIVE, native);
    if c.compat.is_some() {
        a.jump_if(Test::Eq, arch::COMPAT, compat);
    }
    a.ret(eperm);
    for (label, ioctl, rules) in [
        (native, arch::NATIVE_IOCTL, Some(&c.native)),
        (compat, arch::COMPAT_IOCTL, c.compat.as_ref()),
    ] {
        let Some(rules) = rules else { continue };
        a.mark(label);
        a.load(OFF_NR);
        if label == native {
            if let Some(bit) = arch::X32_BIT {
                a.jump_if(Test::Ge, bit, refuse);
            }
        }
        // The terminal guard, before the profile's own rules.
        let dispatch = a.label();
        a.jump_if(Test::Ne, ioctl, dispatch);
        a.load(off_arg(1, false));
        a.jump_if(Test::Eq, super::super::TIOCSTI, refuse);
        a.jump_if(Test::Eq, super::super::TIOCLINUX, refuse);
        a.load(OFF_NR);
        a.mark(dispatch);
        a.table(rules, c.default);
    }
    a.mark(refuse);
    a.ret(eperm);
    a.assemble()
}
