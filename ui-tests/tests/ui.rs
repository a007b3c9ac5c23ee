//! Compile-fail cases of `tensor_fn!`, with reviewed `.stderr` snapshots,
//! and one compile-and-run case; the other compile-and-run cases are the
//! modules of the `pass` test binary.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("fail/*.rs");
    // With a pass case trybuild builds (codegen) instead of only checking,
    // and `fail/collective_gather.rs` and `fail/collective_shard.rs` fail
    // only there: their errors are assertions evaluated when the generic
    // code is instantiated, which `cargo check` does not reach.
    t.pass("pass/*.rs");
}
