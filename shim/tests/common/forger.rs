//! A tenant that does not cooperate: a process that speaks the shim's protocol itself (hello
//! as any class), with one real queue of its own on the emulator (the kernel lists it), and
//! reads the agent's lines with `recvmsg`, keeping the descriptors passed with them
//! ([`test_support::fake_shim`]).

pub use test_support::fake_shim::FakeShim as Forger;
