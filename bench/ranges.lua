-- The load of bench/feeds_download.py: GET the path wrk was given with a Range header of
-- <length> bytes at a random offset of a <size>-byte file, aligned to <length> (as a client
-- fetching a file in pieces); every answer must be a 206.
-- wrk ... -s bench/ranges.lua <url> -- <size> <length>

local size, length, blocks

function init(args)
   size = tonumber(args[1])
   length = tonumber(args[2])
   blocks = math.floor(size / length)
   math.randomseed(os.time() + math.floor(os.clock() * 1e6))
end

function request()
   local first = math.random(0, blocks - 1) * length
   local range = string.format("bytes=%d-%d", first, first + length - 1)
   return wrk.format("GET", nil, { ["Range"] = range })
end

function response(status, headers, body)
   if status ~= 206 then
      error("expected 206, got " .. status)
   end
end
