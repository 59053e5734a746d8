package dev.tpcomm.engine

import dev.tpcomm.Communicator
import dev.tpcomm.InternalTpcommApi

/**
 * A backend's public communicator type (`MpiCommunicator`, `NcclCommunicator`): the user's handle
 * on a [CommunicatorFront], whose operations it forwards unchanged (`Communicator by front`), with
 * the backend's extras beside them. The handle owns nothing: records, failure and close are the
 * front's.
 */
@InternalTpcommApi
public interface FrontHandle {
    /** The front every operation of this handle goes through. */
    public val front: CommunicatorFront
}

/** The front behind [this]: itself, or a backend's handle's; null for a communicator tpcomm did not make. */
internal val Communicator.frontOrNull: CommunicatorFront?
    get() = this as? CommunicatorFront ?: (this as? FrontHandle)?.front
