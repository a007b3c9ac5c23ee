//! Accuracy of the expansions, measured with the interpreter.
