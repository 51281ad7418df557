import CallingServer
import Foundation

exit(CallingCommand.run(CommandLine.arguments))
