//! Compile-fail cases of `tensor_fn!`, with reviewed `.stderr` snapshots.
//! The compile-and-run cases are the modules of the `pass` test binary.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("fail/*.rs");
}
