package dev.tpcomm.nccl.javacpp

import org.bytedeco.javacpp.Pointer

/** A JavaCPP pointer to a native address the engine holds as a `Long` (device pointers, handles). Owns nothing. */
internal class RawPointer(address: Long) : Pointer() {
    init {
        this.address = address
    }
}
