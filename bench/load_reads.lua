-- The read side of bench/load.py: GET requests cycling over a list of paths and bearer tokens,
-- with the responses counted by status class. Each connection is one client: after each
-- response it thinks for a random 0..<think_ms> milliseconds (0: no pause, the connection
-- sends its next request at once).
-- wrk ... -s bench/load_reads.lua <url> -- <think_ms> <token,token,...> <path> <path> ...

local tokens, paths = {}, {}
local counter = 0
local think_ms = 0
-- Globals, one set per thread: done() reads them with thread:get, which sees only globals.
responses_2xx, responses_3xx, responses_4xx, responses_5xx = 0, 0, 0, 0
local threads = {}

function setup(thread)
   table.insert(threads, thread)
end

function init(args)
   think_ms = tonumber(args[1])
   for token in string.gmatch(args[2], "[^,]+") do
      table.insert(tokens, token)
   end
   for i = 3, #args do
      table.insert(paths, args[i])
   end
   math.randomseed(os.time())
end

function delay()
   if think_ms > 0 then
      return math.random(0, think_ms)
   end
   return 0
end

function request()
   counter = counter + 1
   local path = paths[(counter % #paths) + 1]
   local token = tokens[(counter % #tokens) + 1]
   return wrk.format("GET", path, { ["Authorization"] = "Bearer " .. token })
end

function response(status, headers, body)
   local name = "responses_" .. tostring(math.floor(status / 100)) .. "xx"
   _G[name] = (_G[name] or 0) + 1
end

function done(summary, latency, requests)
   local total = {}
   for _, class in ipairs({ "2xx", "3xx", "4xx", "5xx" }) do
      total[class] = 0
      for _, thread in ipairs(threads) do
         total[class] = total[class] + thread:get("responses_" .. class)
      end
   end
   io.write(string.format("STATUS 2xx=%d 3xx=%d 4xx=%d 5xx=%d\n",
      total["2xx"], total["3xx"], total["4xx"], total["5xx"]))
end
