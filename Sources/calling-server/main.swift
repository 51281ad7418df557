import CallingServer
import Foundation

// `peer` lives here rather than in CallingServer: it is the one command that needs the SDK and
// GStreamer, and the server library should not link either.
let arguments = CommandLine.arguments
if arguments.count > 1, arguments[1] == "peer" {
    exit(PeerCommand.run(arguments.dropFirst(2)))
}
if arguments.count > 2, ["help", "--help", "-h"].contains(arguments[1]), arguments[2] == "peer" {
    print(PeerCommand.usage)
    exit(0)
}
exit(CallingCommand.run(arguments))
