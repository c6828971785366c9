-- The load of bench/updates.py: GET the update check URL wrk was given; every other request
-- sends If-None-Match with the ETag of the answer (so about half are answered 304). Each
-- connection pauses a random 0..<think_ms> ms after each answer (0: none), as apps do between
-- launches.
-- wrk ... -s bench/updates.lua <check url> -- <etag> <think_ms>

local etag
local think_ms = 0
local counter = 0

function init(args)
   etag = args[1]
   think_ms = tonumber(args[2] or "0")
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
   if counter % 2 == 0 then
      return wrk.format("GET", nil, { ["If-None-Match"] = etag })
   end
   return wrk.format("GET")
end
