//! Compile-fail and compile-pass cases for tensorfn, run by trybuild.
