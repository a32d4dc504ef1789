//! Storage: the engine-independent contract the query layer uses, and its implementations.
//! For now only the order-preserving key codec that index and primary keys are built from.

pub mod keycodec;
