//! Compile-fail cases (with reviewed `.stderr` snapshots) and compile-and-run
//! cases of `tensor_fn!`.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("fail/*.rs");
    t.pass("pass/*.rs");
}
