//! Operations on tensors: the typed methods, their shape checks (through
//! `tensorfn_core::rules`) and the dispatch to a backend.
