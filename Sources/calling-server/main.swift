import CallingServer
import Foundation

// `peer` lives here rather than in CallingServer: it is the one command that needs the SDK and
// GStreamer, and the server library should not link either.
let arguments = CommandLine.arguments
if arguments.count > 1, arguments[1] == "peer" {
    exit(PeerCommand.run(arguments.dropFirst(2)))
}
exit(CallingCommand.run(arguments))
