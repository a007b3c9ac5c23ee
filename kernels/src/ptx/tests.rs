//! Structure of the emitted PTX.
